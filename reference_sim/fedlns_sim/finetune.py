"""The fine-tuning scenario: a base model pretrained centrally, then federated PEFT fine-tuning on other text.

Federated LLM users rarely train from scratch: they fine-tune a pretrained model with LoRA, and clients send the
PEFT payload (``get_peft_model_state_dict``: the adapters, plus the norms when they are made trainable, see
``docs/peft.md``). With ``pretrain_corpus`` set, a run first trains its family's model centrally on that corpus,
with a vocabulary trained on the same corpus (the base model's tokenizer: a downloaded model brings its own), and
the federation then fine-tunes on ``corpus``. With ``peft="lora"`` the clients train and send only LoRA adapters
(and the norms, unless ``peft_norms=false``); every method then works on those payloads as they are.

The base model depends only on the family, the model's shape, the vocabulary and the pretraining settings, never
on the run's seed or method: every run of a sweep starts from the same base, trained once and cached in the runs
folder's ``_cache`` (``base-<family>-<key>.npz``, written atomically). Its training is deterministic: fixed
initial weights (``BASE_SEED``) and a batch order from the ``pretrain`` stream.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from . import runfiles
from .seeds import stream_seed

BASE_SEED = 0  # the base model is one model, whatever the fine-tuning run's seed
# LoRA's default targets per family: the attention projections (GPT-2 fuses q, k, v into c_attn)
LORA_TARGETS = {"gpt": ("c_attn",), "bert": ("query", "value"), "llama": ("q_proj", "v_proj")}
_BASE_FIELDS = (
    "family",
    "tokenizer",
    "vocab_size",
    "block_size",
    "n_layer",
    "n_embd",
    "n_head",
    "n_kv_head",
    "intermediate_size",
    "max_position_embeddings",
    "dropout",
    "mlm_probability",
    "pretrain_corpus",
    "pretrain_steps",
    "pretrain_batch_size",
    "pretrain_learning_rate",
    "weight_decay",
)


def pretrain_config(config):
    """The config the base model is trained under: the pretraining corpus, all of its training blocks."""
    return dataclasses.replace(
        config, corpus=config.pretrain_corpus, max_train_blocks=0, max_train_examples=0, num_clients=1
    )


def base_tokenizer(config, data_dir: Path | None, cache_dir: Path):
    """The base model's tokenizer (a BPE vocabulary trained on the pretraining corpus), or None when the run has
    no base model or uses the family's pretrained tokenizer (then the corpus builds its usual one)."""
    from .data import bpe_tokenizer, load_texts

    if not config.pretrain_corpus or config.tokenizer != "bpe":
        return None
    train_texts, _, source = load_texts(config.pretrain_corpus, data_dir)
    return bpe_tokenizer(config, train_texts, source, cache_dir)


def pretrained_base(config, tokenizer, data_dir: Path | None, cache_dir: Path, device: str) -> dict[str, np.ndarray]:
    """The base model's weights (named numpy arrays, as ``models.get_params``): from the cache, or trained now.

    ``pretrain_steps`` AdamW steps of ``pretrain_batch_size`` blocks drawn without replacement from the pretraining
    corpus's training blocks (reshuffled at each pass), at ``pretrain_learning_rate`` and the config's weight decay.
    """
    from .client import lm_loss, make_batch
    from .data import build_corpus
    from .models import build_model, get_params

    key = _base_key(config, tokenizer)
    path = Path(cache_dir) / f"base-{config.family}-{key}.npz"
    if path.is_file():
        with np.load(path) as stored:
            return {name: stored[name] for name in stored.files}
    corpus = build_corpus(pretrain_config(config), data_dir, cache_dir, tokenizer=tokenizer)
    torch.manual_seed(BASE_SEED)
    model = build_model(config, tokenizer.vocab_size).to(device)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.pretrain_learning_rate, weight_decay=config.weight_decay
    )
    generator = torch.Generator().manual_seed(stream_seed(BASE_SEED, "pretrain"))
    torch.manual_seed(stream_seed(BASE_SEED, "dropout"))
    data = torch.from_numpy(corpus.train)
    order, position = torch.randperm(len(data), generator=generator), 0
    for _ in range(config.pretrain_steps):
        if position + config.pretrain_batch_size > len(order):
            order, position = torch.randperm(len(data), generator=generator), 0
        batch = data[order[position : position + config.pretrain_batch_size]]
        position += config.pretrain_batch_size
        inputs, targets = make_batch(batch, corpus.task, tokenizer, config.mlm_probability, generator)
        loss, _ = lm_loss(model, inputs.to(device), targets.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    params = get_params(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    runfiles.save_npz(path, params)
    return params


def _base_key(config, tokenizer) -> str:
    settings = {name: getattr(config, name) for name in _BASE_FIELDS}
    settings["tokenizer_name"] = tokenizer.name
    settings["tokenizer_size"] = tokenizer.vocab_size
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def wrap_peft(model: torch.nn.Module, config) -> torch.nn.Module:
    """The model wrapped for the config's PEFT method: LoRA on ``lora_targets`` (default: the family's attention
    projections), no LoRA dropout, the norms trainable and sent unless ``peft_norms`` is false. LoRA's A matrices
    are drawn from torch's current seed (B starts at zero, so the wrapped model computes what the base does)."""
    from peft import LoraConfig, get_peft_model

    from fedlns_torch import make_norms_trainable

    targets = [t.strip() for t in config.lora_targets.split(",") if t.strip()] or list(LORA_TARGETS[config.family])
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,
        target_modules=targets,
        fan_in_fan_out=config.family == "gpt",
    )  # GPT-2's projections are Conv1D (weights transposed)
    if config.peft_norms:
        lora = make_norms_trainable(lora, model)
    return get_peft_model(model, lora)
