"""Model, text, client partitions, local training and the target-corruption attack.

Everything is built offline: a character-level tiny GPT-2 from a config (no weights
downloaded) trained on a synthetic corpus made here, or on Tiny Shakespeare when the
environment variable ``FEDLNS_DATA`` points at the project's data folder.
"""

from __future__ import annotations

import os
import string
from pathlib import Path

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

# Character vocabulary shared by every client without exchanging data: printable ASCII
# plus newline; anything else maps to "?".
VOCABULARY = string.printable[:95] + "\n"
_CHAR_TO_ID = {char: index for index, char in enumerate(VOCABULARY)}
_UNKNOWN_ID = _CHAR_TO_ID["?"]

# Run-config defaults (the same keys as [tool.flwr.app.config] in pyproject.toml).
DEFAULTS: dict[str, object] = {
    "num-server-rounds": 3,
    "num-attackers": 2,
    "min-nodes": 6,
    "activation-threshold": 6,
    "fraction-evaluate": 0.0,
    "local-epochs": 2,
    "batch-size": 8,
    "learning-rate": 3e-3,
    "block-length": 32,
    "blocks-per-client": 16,
    "embedding-dim": 32,
    "num-layers": 2,
    "num-heads": 2,
    "seed": 0,
    "output-dir": "fedlns-run",
    "state-path": "",
    "record-dir": "",
}


def resolve_settings(run_config) -> dict[str, object]:
    """Defaults overridden by a run config; unknown keys are an error."""
    unknown = sorted(set(run_config) - set(DEFAULTS))
    if unknown:
        raise KeyError(f"unknown run-config keys {unknown}; known: {sorted(DEFAULTS)}")
    settings = dict(DEFAULTS)
    for key, value in run_config.items():
        settings[key] = type(DEFAULTS[key])(value)
    return settings


def build_model(settings) -> GPT2LMHeadModel:
    """A tiny character-level GPT-2 from a config (the GPT-style family of the paper, scaled down)."""
    config = GPT2Config(
        vocab_size=len(VOCABULARY),
        n_positions=int(settings["block-length"]),
        n_embd=int(settings["embedding-dim"]),
        n_layer=int(settings["num-layers"]),
        n_head=int(settings["num-heads"]),
        bos_token_id=_CHAR_TO_ID["\n"],
        eos_token_id=_CHAR_TO_ID["\n"],
    )
    return GPT2LMHeadModel(config)


def synthetic_corpus(num_sentences: int = 4000, seed: int = 0) -> str:
    """Sentences from a small grammar: enough structure for a language model to learn."""
    rng = np.random.default_rng(seed)
    subjects = ["the farmer", "a child", "the old sailor", "my neighbour", "the baker", "a teacher"]
    verbs = ["feeds", "paints", "carries", "finds", "sells", "watches", "mends"]
    objects = ["the goat", "a red boat", "two baskets", "the garden gate", "fresh bread", "a map"]
    endings = ["at dawn.", "before noon.", "in the rain.", "with care.", "again.", "by the river."]
    parts = (subjects, verbs, objects, endings)
    lines = [" ".join(str(rng.choice(part)) for part in parts) for _ in range(num_sentences)]
    return "\n".join(lines) + "\n"


def load_text(seed: int = 0) -> str:
    """Tiny Shakespeare from ``$FEDLNS_DATA`` if available, else the synthetic corpus."""
    data_dir = os.environ.get("FEDLNS_DATA")
    if data_dir:
        path = Path(data_dir) / "tiny-shakespeare" / "input.txt"
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return synthetic_corpus(seed=seed)


def encode(text: str) -> np.ndarray:
    """Character ids, shape (len(text),)."""
    return np.array([_CHAR_TO_ID.get(char, _UNKNOWN_ID) for char in text], dtype=np.int64)


def client_blocks(settings, partition_id: int, num_partitions: int) -> torch.Tensor:
    """This client's training blocks, shape (blocks-per-client, block-length).

    As in the paper's IID split: the corpus is cut into blocks, the block indices are
    shuffled with the run seed and dealt round-robin to the clients.
    """
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} outside [0, {num_partitions})")
    block_length = int(settings["block-length"])
    ids = encode(load_text(int(settings["seed"])))
    num_blocks = len(ids) // block_length
    blocks = ids[: num_blocks * block_length].reshape(num_blocks, block_length)
    order = np.random.default_rng(int(settings["seed"])).permutation(num_blocks)
    mine = order[partition_id::num_partitions][: int(settings["blocks-per-client"])]
    return torch.from_numpy(blocks[mine])


def train(model, blocks: torch.Tensor, settings, *, corrupt_targets: bool, seed: int) -> tuple[float, int]:
    """Local AdamW training; returns (mean loss, examples processed over all epochs).

    With ``corrupt_targets`` every training target is replaced by a uniformly random
    token while the inputs stay unchanged (the paper's target-corruption attack,
    p_corr = 1).
    """
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(settings["learning-rate"]), weight_decay=0.01)
    batch_size = int(settings["batch-size"])
    model.train()
    losses, processed = [], 0
    for _ in range(int(settings["local-epochs"])):
        order = torch.randperm(len(blocks), generator=generator)
        for start in range(0, len(blocks), batch_size):
            inputs = blocks[order[start : start + batch_size]]
            targets = inputs
            if corrupt_targets:
                targets = torch.randint(0, model.config.vocab_size, inputs.shape, generator=generator)
            loss = model(input_ids=inputs, labels=targets).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            processed += len(inputs)
    return float(np.mean(losses)), processed


@torch.no_grad()
def evaluate(model, blocks: torch.Tensor) -> float:
    """Mean next-character loss on ``blocks``."""
    model.eval()
    return float(model(input_ids=blocks, labels=blocks).loss)
