"""fedlns_torch: state-dict conversion and norm-parameter selection on real transformers models."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from fedlns_core import NormSelector  # noqa: E402
from fedlns_torch import (  # noqa: E402
    FrozenNormError,
    load_numpy_into_model,
    norm_parameter_names,
    norm_selector,
    numpy_to_state_dict,
    state_dict_to_numpy,
    tied_keys,
)

# The paper's scratch architectures (tab:app_model_architectures), with 2 layers instead
# of 12/12/8 to keep the tests fast; parameter names do not depend on the depth.
PAPER_LAYERS = 2


@functools.cache  # built once; the tests only read them
def paper_gpt2():
    config = transformers.GPT2Config(
        vocab_size=50257, n_embd=256, n_layer=PAPER_LAYERS, n_head=16, n_positions=128,
        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
    )
    return transformers.GPT2LMHeadModel(config)


@functools.cache  # built once; the tests only read them
def paper_bert():
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=256, num_hidden_layers=PAPER_LAYERS, num_attention_heads=16,
        intermediate_size=1024, max_position_embeddings=130,
    )
    return transformers.BertForMaskedLM(config)


@functools.cache  # built once; the tests only read them
def paper_llama():
    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=256, num_hidden_layers=PAPER_LAYERS, num_attention_heads=16,
        num_key_value_heads=8, intermediate_size=1536, max_position_embeddings=256,
        rms_norm_eps=1e-6, initializer_range=0.02,
    )
    return transformers.LlamaForCausalLM(config)


def small_t5():
    config = transformers.T5Config(
        vocab_size=128, d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2, num_decoder_layers=2,
    )
    return transformers.T5ForConditionalGeneration(config)


def small_decoder(family: str):
    """A 2-layer decoder-only model of a transformers family (Qwen2, Gemma, Mistral) from its config."""
    config_class = getattr(transformers, f"{family}Config")
    model_class = getattr(transformers, f"{family}ForCausalLM")
    extra = {"head_dim": 8} if family == "Gemma" else {}
    config = config_class(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, **extra,
    )
    return model_class(config)


# ---------------------------------------------------------------- conversion


def test_float32_cpu_arrays_share_memory_with_the_model():
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    arrays = state_dict_to_numpy(model)
    assert list(arrays) == list(model.state_dict())
    assert np.shares_memory(arrays["1.weight"], model[1].weight.detach().numpy())
    with torch.no_grad():
        model[1].weight.add_(1.0)
    np.testing.assert_array_equal(arrays["1.weight"], model[1].weight.detach().numpy())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_widened_and_restored(dtype):
    model = nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6)).to(dtype)
    arrays = state_dict_to_numpy(model)
    assert {array.dtype for array in arrays.values()} == {np.dtype(np.float32)}
    expected = {key: value.float().numpy() for key, value in model.state_dict().items()}
    for key in expected:
        np.testing.assert_array_equal(arrays[key], expected[key])

    other = nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6)).to(dtype)
    load_numpy_into_model(other, arrays)
    for key, tensor in other.state_dict().items():
        assert tensor.dtype == dtype
        torch.testing.assert_close(tensor, model.state_dict()[key], rtol=0, atol=0)

    state = numpy_to_state_dict(arrays, other)
    assert {tensor.dtype for tensor in state.values()} == {dtype}


def test_integer_buffers_keep_their_dtype():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    arrays = state_dict_to_numpy(model)
    assert arrays["1.num_batches_tracked"].dtype == np.int64
    arrays = {key: np.array(value) for key, value in arrays.items()}
    arrays["1.num_batches_tracked"] = np.array(7)
    load_numpy_into_model(model, arrays)
    assert model[1].num_batches_tracked.item() == 7


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tensors_on_cuda_round_trip():
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)).to("cuda", torch.bfloat16)
    arrays = state_dict_to_numpy(model)
    assert all(isinstance(array, np.ndarray) for array in arrays.values())
    arrays = {key: value + 1.0 for key, value in arrays.items()}
    load_numpy_into_model(model, arrays)
    assert model[1].weight.device.type == "cuda" and model[1].weight.dtype == torch.bfloat16
    np.testing.assert_array_equal(model[1].weight.float().cpu().numpy(), arrays["1.weight"])


def test_gpt2_tied_lm_head_is_handled_once():
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=16)
    )
    assert tied_keys(model) == {"lm_head.weight": "transformer.wte.weight"}
    arrays = state_dict_to_numpy(model)
    assert "lm_head.weight" not in arrays
    assert len(arrays) == len(model.state_dict()) - 1

    changed = {key: np.array(value) for key, value in arrays.items()}
    changed["transformer.wte.weight"] = changed["transformer.wte.weight"] + 0.5
    fresh = transformers.GPT2LMHeadModel(model.config)
    load_numpy_into_model(fresh, changed)
    np.testing.assert_array_equal(fresh.lm_head.weight.detach().numpy(), changed["transformer.wte.weight"])

    state = numpy_to_state_dict(changed, fresh)
    assert "lm_head.weight" in state
    fresh.load_state_dict(state, strict=True)


def test_t5_shared_embeddings_are_handled_once():
    model = small_t5()
    aliases = tied_keys(model)
    assert set(aliases) >= {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    assert set(aliases.values()) == {"shared.weight"}
    arrays = state_dict_to_numpy(model)
    assert not set(aliases) & set(arrays)


def test_empty_tensors_are_never_taken_for_tied_weights():
    model = nn.Module()
    model.register_buffer("first", torch.zeros(0))
    model.register_buffer("second", torch.zeros(0))
    assert tied_keys(model) == {}
    assert set(state_dict_to_numpy(model)) == {"first", "second"}


def test_loading_does_not_mutate_the_arrays():
    model = nn.LayerNorm(3)
    arrays = {"weight": np.array([1.0, 2.0, 3.0]), "bias": np.zeros(3)}
    before = {key: value.copy() for key, value in arrays.items()}
    load_numpy_into_model(model, arrays)
    with torch.no_grad():
        model.weight.mul_(10)
    for key in arrays:
        np.testing.assert_array_equal(arrays[key], before[key])


def test_read_only_arrays_load():
    model = nn.LayerNorm(2)
    weight = np.array([4.0, 5.0])
    weight.flags.writeable = False
    load_numpy_into_model(model, {"weight": weight, "bias": np.zeros(2)})
    assert model.weight.tolist() == [4.0, 5.0]


def test_bad_arrays_give_specific_errors():
    model = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3))
    arrays = {key: np.array(value) for key, value in state_dict_to_numpy(model).items()}
    with pytest.raises(ValueError, match=r"'1.weight' has shape \(4,\), expected \(3,\)"):
        load_numpy_into_model(model, {**arrays, "1.weight": np.ones(4)})
    with pytest.raises(KeyError, match="missing"):
        load_numpy_into_model(model, {k: v for k, v in arrays.items() if k != "0.bias"})
    with pytest.raises(KeyError, match="not in the model"):
        load_numpy_into_model(model, {**arrays, "2.weight": np.ones(3)})
    load_numpy_into_model(model, {"1.bias": np.ones(3)}, strict=False)
    assert model[1].bias.tolist() == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------- norm selection


@pytest.mark.parametrize("build", [paper_gpt2, paper_bert, paper_llama], ids=["gpt2", "bert", "llama"])
def test_norm_names_agree_with_the_core_auto_match_on_paper_models(build):
    model = build()
    names = norm_parameter_names(model)
    assert names
    auto = NormSelector(match="auto").select(list(state_dict_to_numpy(model)))
    assert set(names) == set(auto)
    selector = norm_selector(model)
    assert set(selector.select(list(model.state_dict()))) == set(names)


def test_paper_models_have_the_expected_norm_parameters():
    # GPT-2: ln_1, ln_2 per block + ln_f, each weight and bias.
    assert len(norm_parameter_names(paper_gpt2())) == (2 * PAPER_LAYERS + 1) * 2
    # BERT MLM: embeddings + 2 per layer + the MLM head transform LayerNorm.
    assert len(norm_parameter_names(paper_bert())) == (1 + 2 * PAPER_LAYERS + 1) * 2
    # LLaMA: RMSNorm weight only, 2 per layer + final.
    assert len(norm_parameter_names(paper_llama())) == 2 * PAPER_LAYERS + 1


@pytest.mark.parametrize(
    ("build", "norm_class", "expected_count"),
    [
        # encoder: 2 per block + final; decoder: 3 per block + final; weight only.
        (small_t5, "T5LayerNorm", (2 * 2 + 1) + (3 * 2 + 1)),
        (lambda: small_decoder("Qwen2"), "Qwen2RMSNorm", 2 * 2 + 1),
        (lambda: small_decoder("Gemma"), "GemmaRMSNorm", 2 * 2 + 1),
        (lambda: small_decoder("Mistral"), "MistralRMSNorm", 2 * 2 + 1),
    ],
    ids=["t5", "qwen2", "gemma", "mistral"],
)
def test_architecture_specific_norm_classes_are_found(build, norm_class, expected_count):
    model = build()
    assert any(type(module).__name__ == norm_class for module in model.modules())
    names = norm_parameter_names(model)
    assert len(names) == expected_count
    by_class = {
        f"{module_name}.{parameter_name}"
        for module_name, module in model.named_modules()
        if type(module).__name__ == norm_class
        for parameter_name, _ in module.named_parameters(recurse=False)
    }
    assert set(names) == by_class
    assert set(names) <= set(model.state_dict())


def test_detection_is_by_type_not_by_parameter_name():
    class ScaleRMSNorm(nn.Module):  # an unfamiliar norm class, named like one
        def __init__(self):
            super().__init__()
            self.gain = nn.Parameter(torch.ones(4))

    class Mixer(nn.Module):  # parameter called "norm_weight", but not a norm layer
        def __init__(self):
            super().__init__()
            self.norm_weight = nn.Parameter(torch.ones(4))

    model = nn.ModuleDict(
        {"a": ScaleRMSNorm(), "b": Mixer(), "c": nn.GroupNorm(2, 4), "d": nn.BatchNorm1d(4), "e": nn.RMSNorm(4)}
    )
    assert norm_parameter_names(model) == ("a.gain", "c.weight", "c.bias", "d.weight", "d.bias", "e.weight")


def test_only_trainable_norm_parameters_count():
    model = nn.Sequential(nn.LayerNorm(3), nn.LayerNorm(3))
    model[0].bias.requires_grad_(False)
    assert norm_parameter_names(model) == ("0.weight", "1.weight", "1.bias")
    assert len(norm_parameter_names(model, trainable_only=False)) == 4


def test_frozen_norms_as_in_lora_give_a_clear_error():
    model = small_decoder("Qwen2")
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    # A LoRA-like trainable adapter next to the frozen base model.
    model.adapter = nn.Linear(32, 32)
    assert norm_parameter_names(model) == ()
    with pytest.raises(FrozenNormError) as caught:
        norm_selector(model)
    message = str(caught.value)
    assert "frozen" in message and "modules_to_save" in message and "NormSelector(keys=" in message
    assert "input_layernorm" in message


def test_model_without_norms_is_an_error():
    with pytest.raises(ValueError, match="no normalization layer"):
        norm_selector(nn.Sequential(nn.Linear(2, 2)))
