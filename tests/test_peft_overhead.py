"""Payload overhead of sending the norms with LoRA: config arithmetic, checked against real peft payloads.

The LLaMA-7B figures in docs/peft.md come from `lora_and_norm_sizes`; the same arithmetic is checked
against peft's own payload of a tiny LLaMA and of the full 7B shape built on the meta device (no
weights allocated, nothing downloaded).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from peft import LoraConfig, get_peft_model, get_peft_model_state_dict  # noqa: E402

from fedlns_torch import make_norms_trainable  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

DOC = Path(__file__).resolve().parents[1] / "docs" / "peft.md"
LLAMA_7B = dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=11008, vocab_size=32000,
                num_attention_heads=32, num_key_value_heads=32)
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_and_norm_sizes(*, hidden_size, num_hidden_layers, intermediate_size, num_attention_heads,
                        num_key_value_heads, rank, targets, **_):
    """(LoRA parameters, norm parameters) of a LLaMA-style model; LoRA on a (d_in, d_out) layer adds r (d_in + d_out)."""
    kv = hidden_size // num_attention_heads * num_key_value_heads
    shapes = {"q_proj": (hidden_size, hidden_size), "k_proj": (hidden_size, kv), "v_proj": (hidden_size, kv),
              "o_proj": (hidden_size, hidden_size), "gate_proj": (hidden_size, intermediate_size),
              "up_proj": (hidden_size, intermediate_size), "down_proj": (intermediate_size, hidden_size)}
    lora = num_hidden_layers * sum(rank * sum(shapes[name]) for name in targets)
    norms = (2 * num_hidden_layers + 1) * hidden_size  # input and post-attention RMSNorm per layer, final norm
    return lora, norms


def payload_sizes(config, rank, targets, device="cpu"):
    """(LoRA, norm) parameter counts of peft's payload for a LoRA+norm model of ``config``."""
    with torch.device(device):
        base = transformers.LlamaForCausalLM(config)
    target_modules = "all-linear" if targets == ALL_LINEAR else list(targets)
    model = get_peft_model(base, make_norms_trainable(LoraConfig(r=rank, target_modules=target_modules), base))
    payload = get_peft_model_state_dict(model)
    lora = sum(tensor.numel() for key, tensor in payload.items() if ".lora_" in key)
    return lora, sum(tensor.numel() for key, tensor in payload.items() if ".lora_" not in key)


SETUPS = [(16, ("q_proj", "v_proj")), (32, ALL_LINEAR)]


@pytest.mark.parametrize(("rank", "targets"), SETUPS, ids=["r16-qv", "r32-all-linear"])
def test_arithmetic_matches_peft_on_a_tiny_llama(rank, targets):
    tiny = dict(hidden_size=64, num_hidden_layers=3, intermediate_size=176, vocab_size=128,
                num_attention_heads=4, num_key_value_heads=2)
    config = transformers.LlamaConfig(**tiny)
    assert payload_sizes(config, rank, targets) == lora_and_norm_sizes(**tiny, rank=rank, targets=targets)


@pytest.mark.parametrize(("rank", "targets"), SETUPS, ids=["r16-qv", "r32-all-linear"])
def test_arithmetic_matches_peft_on_the_7b_shape_on_the_meta_device(rank, targets):
    config = transformers.LlamaConfig(**LLAMA_7B)
    assert payload_sizes(config, rank, targets, device="meta") == lora_and_norm_sizes(
        **LLAMA_7B, rank=rank, targets=targets)


def test_docs_state_the_computed_figures():
    text = DOC.read_text(encoding="utf-8")
    for rank, targets in SETUPS:
        lora, norms = lora_and_norm_sizes(**LLAMA_7B, rank=rank, targets=targets)
        for figure in (f"{lora:,}", f"{norms:,}", f"{100 * norms / lora:.2f}%", f"{100 * norms / (lora + norms):.2f}%"):
            assert figure in text, figure
