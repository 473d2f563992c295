"""Client partitions, the malicious set and client sampling of fedlns_sim."""

import numpy as np
import pytest

pytest.importorskip("torch")
from fedlns_sim.partitions import (choose_malicious, iid_partition, make_partition, noniid_partition,  # noqa: E402
                                   sample_clients)
from fedlns_sim.seeds import STREAMS, stream_key, stream_rng  # noqa: E402


@pytest.mark.parametrize("kind", ["iid", "noniid"])
@pytest.mark.parametrize("num_blocks,num_clients", [(100, 10), (1003, 20), (40, 20)])
def test_partition_is_a_disjoint_cover_with_balanced_sizes(kind, num_blocks, num_clients):
    parts = make_partition(kind, num_blocks, num_clients, seed=100)
    assert len(parts) == num_clients
    everything = np.concatenate(parts)
    assert sorted(everything.tolist()) == list(range(num_blocks))     # every block once: disjoint and complete
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= (1 if kind == "iid" else 2)


def test_iid_is_round_robin_of_the_seeded_shuffle():
    order = stream_rng(7, "partition").permutation(23)
    parts = iid_partition(23, 5, seed=7)
    for client in range(5):
        assert parts[client].tolist() == sorted(order[client::5].tolist())


def test_noniid_gives_each_client_two_contiguous_shards():
    parts = noniid_partition(200, 10, seed=3)
    shards = np.array_split(np.arange(200), 20)
    shard_of = {int(b): i for i, shard in enumerate(shards) for b in shard}
    used = []
    for part in parts:
        ids = sorted({shard_of[int(b)] for b in part})
        assert len(ids) == 2
        assert sorted(part.tolist()) == sorted(np.concatenate([shards[i] for i in ids]).tolist())
        used += ids
    assert sorted(used) == list(range(20))
    # shuffled: not simply client k <- shards 2k, 2k+1
    assert any(sorted({shard_of[int(b)] for b in part}) != [2 * k, 2 * k + 1] for k, part in enumerate(parts))


@pytest.mark.parametrize("kind", ["iid", "noniid"])
def test_partition_is_deterministic_in_the_seed(kind):
    a = make_partition(kind, 500, 25, seed=100)
    b = make_partition(kind, 500, 25, seed=100)
    c = make_partition(kind, 500, 25, seed=200)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_too_few_blocks_and_unknown_kind_are_errors():
    with pytest.raises(ValueError, match="cannot split 5 blocks into 10 clients"):
        iid_partition(5, 10, seed=0)
    with pytest.raises(ValueError, match="cannot split 15 blocks into 10 clients x 2 shards"):
        noniid_partition(15, 10, seed=0)
    with pytest.raises(ValueError, match="unknown partition 'dirichlet'"):
        make_partition("dirichlet", 100, 10, seed=0)


def test_malicious_set_and_sampling_are_fixed_by_the_seed():
    bad = choose_malicious(200, 80, seed=100)
    assert len(bad) == 80 and bad == choose_malicious(200, 80, seed=100) and all(0 <= c < 200 for c in bad)
    assert bad != choose_malicious(200, 80, seed=200)
    rounds = [sample_clients(200, 20, seed=100, round_index=t) for t in range(1, 6)]
    assert all(len(set(r)) == 20 for r in rounds)
    assert rounds == [sample_clients(200, 20, seed=100, round_index=t) for t in range(1, 6)]
    assert len({tuple(r) for r in rounds}) == 5


def test_random_streams_never_share_a_key():
    """Each stream has its own tag in a fixed slot: no (stream, round, client) key equals another's
    (the old layout gave round r's sampling and client r's round-2 training the same seed)."""
    assert len(set(STREAMS.values())) == len(STREAMS)
    keys = {tuple(stream_key(100, stream, r, c)) for stream in STREAMS for r in range(6) for c in range(6)}
    assert len(keys) == len(STREAMS) * 36
    assert stream_key(100, "sampling", 2, 0) != stream_key(100, "batches", 0, 2)
    with pytest.raises(KeyError, match="unknown random stream"):
        stream_key(100, "sampleing")
