"""Model, text, partitions, local training and the target-corruption attack of the PEFT example.

FlowerTune's LLM templates fine-tune a downloaded LLaMA/Mistral with 4-bit QLoRA. Here the
base model is a tiny LLaMA built offline from a config with a fixed seed (every node builds
the same frozen base), the tokenizer is byte-level (256 ids, nothing to train or download),
and LoRA runs in float32 on the CPU: 4-bit quantization (bitsandbytes) needs a GPU. Nothing
changes for FedLNS: as the stacks ship, the norms stay frozen and the payload holds the LoRA
factors only, which ``FedLNS()`` screens by their LoRA signature. ``train-norms = 1`` also trains
and sends the norm layers (``make_norms_trainable`` adds them to ``modules_to_save``); the
screener then reads both.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from fedlns_torch import make_norms_trainable

VOCABULARY_SIZE = 256  # bytes

# Run-config defaults (the same keys as [tool.flwr.app.config] in pyproject.toml).
DEFAULTS: dict[str, object] = {
    "num-server-rounds": 4,
    "num-attackers": 2,
    "min-nodes": 6,
    "activation-threshold": 6,
    "local-steps": 8,
    "batch-size": 8,
    "learning-rate": 3e-3,
    "block-length": 64,
    "blocks-per-client": 64,
    "eval-blocks": 32,
    "hidden-size": 64,
    "num-layers": 2,
    "num-heads": 4,
    "lora-rank": 8,
    "lora-targets": "all-linear",
    "train-norms": 0,
    "seed": 0,
    "data-file": "",
    "output-dir": "fedlns-peft-run",
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


def build_model(settings):
    """The frozen base (same seed everywhere) wrapped with LoRA (and trainable, sent norm layers with
    ``train-norms``)."""
    torch.manual_seed(int(settings["seed"]))  # the "pretrained" base: identical on every node
    hidden = int(settings["hidden-size"])
    base = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCABULARY_SIZE, hidden_size=hidden, intermediate_size=(8 * hidden) // 3,
        num_hidden_layers=int(settings["num-layers"]), num_attention_heads=int(settings["num-heads"]),
        num_key_value_heads=int(settings["num-heads"]), max_position_embeddings=int(settings["block-length"]),
    ))
    rank = int(settings["lora-rank"])
    targets = str(settings["lora-targets"])
    lora = LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=targets if targets == "all-linear" else targets.split(","),
    )
    return get_peft_model(base, make_norms_trainable(lora, base) if int(settings["train-norms"]) else lora)


def data_path(settings) -> Path:
    """The text: ``data-file``, else ``$FEDLNS_DATA/tiny-shakespeare/input.txt``."""
    if settings["data-file"]:
        path = Path(str(settings["data-file"]))
    elif os.environ.get("FEDLNS_DATA"):
        path = Path(os.environ["FEDLNS_DATA"]) / "tiny-shakespeare" / "input.txt"
    else:
        raise FileNotFoundError("set the run-config key data-file, or FEDLNS_DATA to the data folder")
    if not path.is_file():
        raise FileNotFoundError(f"text file {path} not found")
    return path


def _blocks(settings) -> tuple[np.ndarray, np.ndarray]:
    """(all blocks, shuffled block order), blocks of shape (n_blocks, block-length) byte ids."""
    ids = np.frombuffer(data_path(settings).read_bytes(), dtype=np.uint8).astype(np.int64)
    length = int(settings["block-length"])
    blocks = ids[: len(ids) // length * length].reshape(-1, length)
    return blocks, np.random.default_rng(int(settings["seed"])).permutation(len(blocks))


def client_blocks(settings, partition_id: int, num_partitions: int) -> torch.Tensor:
    """This client's blocks (IID: shuffled blocks dealt round-robin), never the held-out ones."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} outside [0, {num_partitions})")
    blocks, order = _blocks(settings)
    order = order[int(settings["eval-blocks"]):]
    return torch.from_numpy(blocks[order[partition_id::num_partitions][: int(settings["blocks-per-client"])]])


def held_out_blocks(settings) -> torch.Tensor:
    """Blocks no client trains on: the server's measure of the honest loss."""
    blocks, order = _blocks(settings)
    return torch.from_numpy(blocks[order[: int(settings["eval-blocks"])]])


def train(model, blocks: torch.Tensor, settings, *, corrupt_targets: bool, seed: int) -> tuple[float, int]:
    """AdamW on the trainable parameters (LoRA, and the norms with ``train-norms``); returns (mean loss,
    examples seen).

    With ``corrupt_targets`` every target is a uniformly random byte, the inputs unchanged
    (the paper's target-corruption attack, p_corr = 1).
    """
    generator = torch.Generator().manual_seed(seed)
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=float(settings["learning-rate"]), weight_decay=0.0)
    batch_size = int(settings["batch-size"])
    model.train()
    losses = []
    for _ in range(int(settings["local-steps"])):
        inputs = blocks[torch.randint(0, len(blocks), (batch_size,), generator=generator)]
        targets = inputs
        if corrupt_targets:
            targets = torch.randint(0, VOCABULARY_SIZE, inputs.shape, generator=generator)
        loss = model(input_ids=inputs, labels=targets).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return float(np.mean(losses)), int(settings["local-steps"]) * batch_size


@torch.no_grad()
def evaluate(model, blocks: torch.Tensor) -> float:
    """Mean next-byte loss on ``blocks``."""
    model.eval()
    return float(model(input_ids=blocks, labels=blocks).loss)
