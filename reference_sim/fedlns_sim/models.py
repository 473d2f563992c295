"""The three scratch transformers (tab:app_model_architectures), built from transformers configs."""

from __future__ import annotations

import numpy as np
import torch

from fedlns_torch import (
    is_peft_model,
    load_numpy_into_model,
    load_numpy_into_peft_model,
    peft_state_dict_to_numpy,
    tensor_to_numpy,
)


def build_model(config, vocab_size: int) -> torch.nn.Module:
    """GPT-2 causal LM, BERT masked LM or LLaMA causal LM, randomly initialised from ``torch``'s current seed."""
    if config.family == "gpt":
        from transformers import GPT2Config, GPT2LMHeadModel

        gpt_config = GPT2Config(
            vocab_size=vocab_size,
            n_positions=config.max_position_embeddings,
            n_embd=config.n_embd,
            n_layer=config.n_layer,
            n_head=config.n_head,
            n_inner=config.intermediate_size or None,
            resid_pdrop=config.dropout,
            embd_pdrop=config.dropout,
            attn_pdrop=config.dropout,
            bos_token_id=None,
            eos_token_id=None,
        )
        model: torch.nn.Module = GPT2LMHeadModel(gpt_config)
    elif config.family == "bert":
        from transformers import BertConfig, BertForMaskedLM

        bert_config = BertConfig(
            vocab_size=vocab_size,
            hidden_size=config.n_embd,
            num_hidden_layers=config.n_layer,
            num_attention_heads=config.n_head,
            intermediate_size=config.intermediate_size or 4 * config.n_embd,
            max_position_embeddings=config.max_position_embeddings,
        )
        model = BertForMaskedLM(bert_config)
    elif config.family == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        llama_config = LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=config.n_embd,
            num_hidden_layers=config.n_layer,
            num_attention_heads=config.n_head,
            num_key_value_heads=config.n_kv_head or config.n_head,
            intermediate_size=config.intermediate_size or 4 * config.n_embd,
            max_position_embeddings=config.max_position_embeddings,
            rms_norm_eps=1e-6,
            initializer_range=0.02,
        )
        model = LlamaForCausalLM(llama_config)
    else:
        raise ValueError(f"unknown family {config.family!r}")
    return model


def get_params(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """What a client sends, as numpy copies through ``fedlns_torch``: every parameter by state-dict name (tied
    weights once), or for a PEFT model its payload (``get_peft_model_state_dict``: adapters and saved norms)."""
    if is_peft_model(model):
        return {name: array.copy() for name, array in peft_state_dict_to_numpy(model).items()}
    return {name: tensor_to_numpy(p).copy() for name, p in model.named_parameters()}


def set_params(model: torch.nn.Module, params: dict[str, np.ndarray]) -> None:
    """Load named numpy arrays (as ``get_params`` gives them) into the model in place."""
    if is_peft_model(model):
        load_numpy_into_peft_model(model, params)
    else:
        load_numpy_into_model(model, params, strict=False)


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
