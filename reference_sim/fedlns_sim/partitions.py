"""Client data partitions over training-block indices (tab:app_client_partitions)."""

from __future__ import annotations

import numpy as np

from .seeds import stream_rng


def iid_partition(num_blocks: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """Shuffle all block indices with the run seed and deal them round-robin to the clients.

    Examples
    --------
    >>> parts = iid_partition(10, 3, seed=0)
    >>> [len(p) for p in parts], sorted(np.concatenate(parts).tolist()) == list(range(10))
    ([4, 3, 3], True)
    """
    _check(num_blocks, num_clients, 1)
    order = stream_rng(seed, "partition").permutation(num_blocks)
    return [np.sort(order[client::num_clients]) for client in range(num_clients)]


def noniid_partition(num_blocks: int, num_clients: int, seed: int, shards_per_client: int = 2) -> list[np.ndarray]:
    """Cut the ordered block indices into ``shards_per_client * K`` contiguous shards; deal shuffled shards.

    Examples
    --------
    >>> parts = noniid_partition(12, 3, seed=0)
    >>> [len(p) for p in parts]
    [4, 4, 4]
    """
    _check(num_blocks, num_clients, shards_per_client)
    shards = np.array_split(np.arange(num_blocks), num_clients * shards_per_client)
    order = stream_rng(seed, "partition").permutation(len(shards))
    return [
        np.concatenate([shards[s] for s in order[client * shards_per_client : (client + 1) * shards_per_client]])
        for client in range(num_clients)
    ]


def make_partition(kind: str, num_blocks: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """``iid`` or ``noniid`` (two shards per client)."""
    if kind == "iid":
        return iid_partition(num_blocks, num_clients, seed)
    if kind == "noniid":
        return noniid_partition(num_blocks, num_clients, seed)
    raise ValueError(f"unknown partition {kind!r}; expected 'iid' or 'noniid'")


def _check(num_blocks: int, num_clients: int, shards_per_client: int) -> None:
    if num_clients < 1 or num_blocks < num_clients * shards_per_client:
        raise ValueError(f"cannot split {num_blocks} blocks into {num_clients} clients x {shards_per_client} shards")


def choose_malicious(num_clients: int, num_malicious: int, seed: int) -> frozenset[int]:
    """The fixed malicious subset of the population for one run (chosen once from the run seed)."""
    rng = stream_rng(seed, "malicious")
    return frozenset(int(i) for i in rng.choice(num_clients, size=num_malicious, replace=False))


def sample_clients(num_clients: int, per_round: int, seed: int, round_index: int) -> list[int]:
    """Clients of one round, uniformly without replacement; a pure function of (seed, round) so resumes agree."""
    rng = stream_rng(seed, "sampling", round_index)
    return sorted(int(i) for i in rng.choice(num_clients, size=per_round, replace=False))
