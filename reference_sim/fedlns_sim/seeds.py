"""Named random streams: every random draw of a run is a pure function of (seed, stream, round, client).

Each stream has a fixed tag and every key has the same four slots, so two streams can never share a seed (the
old layout seeded round r's client sampling with ``[seed, 2, r]`` and client r's training in round 2 with
``(seed, 2, r)``: the same numbers). Tags are part of the results' identity: never renumber one.
"""

from __future__ import annotations

import numpy as np

STREAMS = {
    "partition": 1,  # IID shuffle / non-IID shard order
    "malicious": 2,  # the fixed malicious set
    "sampling": 3,  # clients of a round
    "batches": 4,  # a client's batch order, masking and attack draws
    "dropout": 5,  # a client's dropout (torch's global generator)
    "flame": 6,  # FLAME's noise
    "eval_masks": 7,  # the fixed MLM masks of the evaluation set
    "screening": 8,  # FedLNS's mixture initialisations
    "attack": 9,  # model-poisoning draws of a round (the Gaussian attack's noise)
    "pretrain": 10,  # the base model's batch order and masking (fine-tuning scenario)
}


def stream_key(seed: int, stream: str, round_index: int = 0, client: int = 0) -> list[int]:
    """The entropy of one stream at (round, client): ``[seed, tag, round, client]``.

    Examples
    --------
    >>> stream_key(100, "sampling", 2, 0) != stream_key(100, "batches", 0, 2)
    True
    """
    if stream not in STREAMS:
        raise KeyError(f"unknown random stream {stream!r}; known: {sorted(STREAMS)}")
    return [int(seed), STREAMS[stream], int(round_index), int(client)]


def stream_seed(seed: int, stream: str, round_index: int = 0, client: int = 0) -> int:
    """A 32-bit seed for torch generators, from the stream key."""
    return int(np.random.SeedSequence(stream_key(seed, stream, round_index, client)).generate_state(1)[0])


def stream_rng(seed: int, stream: str, round_index: int = 0, client: int = 0) -> np.random.Generator:
    """A numpy generator for the stream."""
    return np.random.default_rng(stream_key(seed, stream, round_index, client))
