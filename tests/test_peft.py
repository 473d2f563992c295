"""fedlns_torch on real peft models: payload names, the norm recipe, conversion and screening."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from peft import (  # noqa: E402
    AdaptionPromptConfig,
    LNTuningConfig,
    LoraConfig,
    TrainableTokensConfig,
    get_peft_model,
    get_peft_model_state_dict,
)
from peft.utils.other import ModulesToSaveWrapper  # noqa: E402

from fedlns_core import FedLNS, NormSelector  # noqa: E402
from fedlns_torch import (  # noqa: E402
    FrozenNormError,
    load_numpy_into_peft_model,
    lora_parameter_names,
    make_norms_trainable,
    norm_parameter_names,
    norm_selector,
    peft_state_dict_to_numpy,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def _decoder(family: str):
    config = getattr(transformers, f"{family}Config")(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1,
    )
    return getattr(transformers, f"{family}ForCausalLM")(config)


# name -> (build the base model, LoRA target modules); each 2 layers, offline, from a config.
ARCHITECTURES = {
    "gpt2": (lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=32)), ["c_attn"]),
    "llama": (lambda: _decoder("Llama"), ["q_proj", "v_proj"]),
    "bert": (lambda: transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32)), ["query", "value"]),
    "opt": (lambda: transformers.OPTForCausalLM(transformers.OPTConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, ffn_dim=32,
        word_embed_proj_dim=16, max_position_embeddings=32)), ["q_proj", "v_proj"]),
    "mistral": (lambda: _decoder("Mistral"), ["q_proj", "v_proj"]),
    "qwen2": (lambda: _decoder("Qwen2"), ["q_proj", "v_proj"]),
}


def _base(name: str, seed: int = 0):
    torch.manual_seed(seed)  # the same "pretrained" base on every call
    return ARCHITECTURES[name][0]()


def lora_with_norms(name: str, seed: int = 0):
    base = _base(name, seed)
    config = make_norms_trainable(LoraConfig(r=2, target_modules=ARCHITECTURES[name][1]), base)
    return get_peft_model(base, config)


def ln_tuning(name: str, seed: int = 0):
    base = _base(name, seed)
    return get_peft_model(base, make_norms_trainable(LNTuningConfig(), base))


@pytest.fixture(params=sorted(ARCHITECTURES))
def architecture(request):
    return request.param


# ---------------------------------------------------------------- payload names


def test_lora_payload_norm_entries_are_what_adapter_and_core_select(architecture):
    model = lora_with_norms(architecture)
    payload = get_peft_model_state_dict(model)
    lora_keys = {key for key in payload if ".lora_A." in key or ".lora_B." in key}
    assert lora_keys, "LoRA stays LoRA"
    norm_entries = [key for key in payload if key not in lora_keys]  # modules_to_save holds only norms

    names = norm_parameter_names(model)
    assert list(names) == norm_entries
    assert norm_selector(model).select(payload) == names
    assert NormSelector(match="auto").select(payload) == names
    # Every norm parameter of the base model is sent, once.
    assert len(names) == len(norm_parameter_names(_base(architecture)))
    wrapped = [module.original_module for module in model.modules() if isinstance(module, ModulesToSaveWrapper)]
    assert wrapped and all(type(inner).__name__.endswith("Norm") for inner in wrapped)


@pytest.mark.parametrize("dora", [False, True])
def test_lora_signature_entries_are_what_adapter_and_core_read(architecture, dora):
    """Norms frozen (as the stacks ship): the payload is the adapter only, and FedLNS() reads every LoRA factor (and
    DoRA magnitude) of it, under the names the torch adapter gives."""
    base = _base(architecture)
    model = get_peft_model(base, LoraConfig(r=2, target_modules=ARCHITECTURES[architecture][1], use_dora=dora))
    payload = peft_state_dict_to_numpy(model)
    names = lora_parameter_names(model)
    assert set(names) == set(payload)                                 # the adapter's payload is all LoRA
    assert sum(".lora_magnitude_vector" in name for name in names) == (len(names) // 3 if dora else 0)
    keys, rows = FedLNS().client_signatures(payload, {0: payload})
    sources = {key.split(" ")[0] for key in keys}
    assert sources == set(names) and not rows[0].any()


@pytest.mark.parametrize("kind", ["embedding", "adalora"])
def test_lora_signature_reads_embedding_and_adalora_factors(kind):
    """LoRA on the token embedding (``lora_embedding_A``/``_B``) and AdaLoRA (``lora_A``/``lora_B`` without
    ``.weight``) are LoRA factors for ``signature="auto"``: an attacker that moves only the embedding adapter shows
    in its column norms, and a round of AdaLoRA payloads screens without an error."""
    base = _base("llama")
    if kind == "embedding":
        config = LoraConfig(r=2, target_modules=["q_proj", "v_proj", "embed_tokens"])
    else:
        config = peft.AdaLoraConfig(r=2, target_modules=["q_proj", "v_proj"], total_step=10)
    model = get_peft_model(base, config)
    payload = peft_state_dict_to_numpy(model)
    names = lora_parameter_names(model)
    suffixes = ("lora_embedding_A", "lora_embedding_B") if kind == "embedding" else (".lora_A", ".lora_B")
    factors = [key for key in payload if key.endswith(suffixes)]
    assert factors and set(factors) <= set(names)
    rng = np.random.default_rng(0)
    clients = {i: {key: value + 1e-3 * rng.standard_normal(value.shape).astype(value.dtype)
                   for key, value in payload.items()} for i in range(8)}
    keys, rows = FedLNS().client_signatures(payload, clients)
    assert {key.split(" ")[0] for key in keys} == set(names)
    if kind == "embedding":  # client 7 moves only the embedding adapter's A, by 1 in every value
        embedding_a = next(key for key in factors if key.endswith("lora_embedding_A"))
        clients[7] = {**payload, embedding_a: payload[embedding_a] + 1.0}
        keys, rows = FedLNS().client_signatures(payload, clients)
        sizes = [payload[key.split(" ")[0]].shape[1 if key.endswith("column norms") else 0] for key in keys]
        start = sum(sizes[: keys.index(f"{embedding_a} column norms")])
        tokens = slice(start, start + payload[embedding_a].shape[1])
        np.testing.assert_allclose(rows[7][tokens], np.sqrt(payload[embedding_a].shape[0]), rtol=1e-6)
        assert np.count_nonzero(rows[7]) == payload[embedding_a].shape[1]
    result = FedLNS(activation_threshold=0, random_state=0).screen(payload, clients, {i: 10 for i in clients})
    assert result.signature == "lora" and len(result.retained) + len(result.rejected) == len(clients)


@pytest.mark.parametrize("dora", [False, True])
def test_lora_on_convolutions_is_screened(dora):
    """PEFT's LoRA on ``Conv2d`` layers sends 4-D factors (and DoRA a (1, c_out, 1, 1) magnitude); ``signature="auto"``
    reads them (one column norm per input channel and kernel position, one row norm, and one magnitude, per output
    channel), screens a second round from the bank's layout, and rejects an attacker that moves them far more."""
    torch.manual_seed(0)
    base = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 6, 3))
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["0", "2"], use_dora=dora))
    payload = peft_state_dict_to_numpy(model)
    assert {value.ndim for value in payload.values()} == {4} and set(lora_parameter_names(model)) == set(payload)
    rng = np.random.default_rng(0)
    screener = FedLNS(activation_threshold=8, random_state=0)
    for start in (0, 8):
        clients = {i: {key: value + (0.05 if i == 15 else 1e-3) * rng.standard_normal(value.shape).astype(value.dtype)
                       for key, value in payload.items()} for i in range(start, start + 8)}
        result = screener.screen(payload, clients, {i: 10 for i in clients})
    _, rows = screener.client_signatures(payload, {0: payload})
    assert result.signature == "lora" and rows[0].shape == (3 * 9 + 8 + 8 * 9 + 6 + (8 + 6 if dora else 0),)
    assert list(result.rejected) == [15]


def test_ia3_vectors_are_read_when_the_selector_names_them():
    """IA3 sends per-channel scaling vectors, neither LoRA factors nor norms: ``"auto"`` says so and what to pass,
    and with a selector that names them they are read as a normalization parameter's change is."""
    model = get_peft_model(_base("llama"), peft.IA3Config(target_modules=["k_proj", "v_proj", "down_proj"],
                                                          feedforward_modules=["down_proj"]))
    payload = peft_state_dict_to_numpy(model)
    clients = {i: {key: value + 1e-3 * (i + 1) * np.ones_like(value) for key, value in payload.items()}
               for i in range(4)}
    with pytest.raises(ValueError, match=r"found neither LoRA factors .* selector=NormSelector\(patterns=\.\.\.\)"):
        FedLNS().screen(payload, clients, {i: 1 for i in clients})
    screener = FedLNS(selector=NormSelector(patterns=[r"\.ia3_l$"]), activation_threshold=0, random_state=0)
    result = screener.screen(payload, clients, {i: 1 for i in clients})
    assert result.signature == "norm" and set(result.signature_keys) == set(payload)


def test_ln_tuning_payload_norm_entries_are_what_adapter_and_core_select(architecture):
    model = ln_tuning(architecture)
    payload = get_peft_model_state_dict(model)
    names = norm_parameter_names(model)
    assert list(names) == list(payload)  # LN-tuning sends the norms and nothing else
    assert NormSelector(match="auto").select(payload) == names
    assert len(names) == len(norm_parameter_names(_base(architecture)))


def test_auto_match_does_not_take_an_ln_tuned_linear_layer_for_a_norm():
    base = _base("llama")
    model = get_peft_model(base, LNTuningConfig(target_modules=["down_proj", "norm"]))
    payload = list(get_peft_model_state_dict(model))
    assert "base_model.model.model.layers.0.mlp.down_proj.ln_tuning_layers.weight" in payload
    selected = NormSelector(match="auto").select(payload)
    assert selected == norm_parameter_names(model)
    assert all("down_proj" not in key for key in selected)


def test_make_norms_trainable_returns_a_new_config_with_short_names():
    base = _base("llama")
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"])
    new = make_norms_trainable(config, base)
    assert config.modules_to_save == ["lm_head"]  # not mutated
    assert new.modules_to_save == ["lm_head", "input_layernorm", "post_attention_layernorm", "norm"]
    assert new.r == 4 and new.target_modules == config.target_modules
    gpt2 = make_norms_trainable(LoraConfig(target_modules=["c_attn"]), _base("gpt2"))
    assert gpt2.modules_to_save == ["ln_1", "ln_2", "ln_f"]
    bert = make_norms_trainable(LoraConfig(target_modules=["query"]), _base("bert"))
    assert bert.modules_to_save == ["LayerNorm"]


def test_the_recipes_in_the_docs_are_what_the_helper_writes():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "peft.md").read_text(encoding="utf-8")
    for name in ("llama", "mistral", "qwen2", "gpt2", "bert"):
        written = make_norms_trainable(LoraConfig(target_modules=ARCHITECTURES[name][1]), _base(name))
        assert str(written.modules_to_save).replace("'", '"') in text, (name, written.modules_to_save)


def test_a_short_name_that_would_catch_another_module_becomes_a_path():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(4)
            self.proj = nn.Linear(4, 4)
            self.gate_norm = nn.Linear(4, 4)  # named like a norm, is not one

    model = nn.Sequential()
    model.add_module("block", Block())
    config = make_norms_trainable(LoraConfig(target_modules=["proj"]), model)
    # peft matches modules_to_save by plain string suffix: "norm" would also catch gate_norm.
    assert config.modules_to_save == ["block.norm"]
    wrapped = get_peft_model(model, config)
    assert isinstance(wrapped.base_model.model.block.norm, ModulesToSaveWrapper)
    assert not isinstance(wrapped.base_model.model.block.gate_norm, ModulesToSaveWrapper)
    assert norm_parameter_names(wrapped) == ("base_model.model.block.norm.weight", "base_model.model.block.norm.bias")


def test_built_lora_model_without_norms_gets_them_in_place():
    model = get_peft_model(_base("llama"), LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(FrozenNormError, match="make_norms_trainable"):
        norm_selector(model)
    assert make_norms_trainable(model) is model
    payload = get_peft_model_state_dict(model)
    assert norm_parameter_names(model) == NormSelector().select(payload)
    assert len(norm_parameter_names(model)) == 5
    assert make_norms_trainable(model) is model  # a second call changes nothing
    assert len(get_peft_model_state_dict(model)) == len(payload)


def test_trainable_norms_that_are_not_sent_are_an_error():
    model = get_peft_model(_base("llama"), LoraConfig(r=2, target_modules=["q_proj"]))
    for name, parameter in model.named_parameters():
        if "layernorm" in name:
            parameter.requires_grad_(True)  # trains, but get_peft_model_state_dict leaves it out
    assert norm_parameter_names(model) == ()
    with pytest.raises(FrozenNormError, match="leaves them out"):
        norm_selector(model)


def test_methods_without_modules_to_save_are_refused():
    base = _base("llama")
    for config in (AdaptionPromptConfig(adapter_len=2, adapter_layers=1),
                   TrainableTokensConfig(token_indices=[0, 1])):
        with pytest.raises(FrozenNormError, match="has no modules_to_save"):
            make_norms_trainable(config, base)
    with pytest.raises(TypeError, match="base model"):
        make_norms_trainable(LoraConfig())
    with pytest.raises(TypeError, match="PeftConfig or peft.PeftModel"):
        make_norms_trainable(base)


def test_quantized_norm_parameters_are_refused():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    model[1].weight = nn.Parameter(torch.ones(4, dtype=torch.uint8), requires_grad=False)
    with pytest.raises(FrozenNormError, match="quantized"):
        make_norms_trainable(LoraConfig(target_modules=["0"]), model)


def test_ln_tuning_on_top_of_lora_is_refused_by_peft():
    # Pinned: peft 0.21 will not mix LN-tuning and LoRA in one model,
    # which is why make_norms_trainable uses modules_to_save for LoRA.
    model = get_peft_model(_base("llama"), LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="different peft types"):
        model.add_adapter("norms", LNTuningConfig(target_modules=["norm"]))


# ---------------------------------------------------------------- conversion and screening


@pytest.mark.parametrize("build", [lora_with_norms, ln_tuning], ids=["lora", "ln_tuning"])
def test_payload_round_trips_through_numpy(architecture, build):
    sender = build(architecture, seed=0)
    arrays = {key: value + 0.25 for key, value in peft_state_dict_to_numpy(sender).items()}
    before = {key: value.copy() for key, value in arrays.items()}
    assert list(arrays) == list(get_peft_model_state_dict(sender))

    receiver = build(architecture, seed=0)
    load_numpy_into_peft_model(receiver, arrays)
    received = peft_state_dict_to_numpy(receiver)
    assert list(received) == list(arrays)
    for key in arrays:
        np.testing.assert_array_equal(received[key], arrays[key])
        np.testing.assert_array_equal(arrays[key], before[key])  # inputs untouched


def test_bad_payload_arrays_give_specific_errors():
    model = lora_with_norms("llama")
    arrays = {key: value.copy() for key, value in peft_state_dict_to_numpy(model).items()}
    key = "base_model.model.model.norm.weight"
    with pytest.raises(ValueError, match=rf"'{key}' has shape \(3,\), expected \(16,\)"):
        load_numpy_into_peft_model(model, {**arrays, key: np.ones(3)})
    with pytest.raises(KeyError, match="missing"):
        load_numpy_into_peft_model(model, {k: v for k, v in arrays.items() if k != key})
    with pytest.raises(KeyError, match="not in the model"):
        load_numpy_into_peft_model(model, {**arrays, "base_model.model.lm_head.weight": np.ones((64, 16))})
    load_numpy_into_peft_model(model, {key: np.full(16, 2.0)}, strict=False)
    assert peft_state_dict_to_numpy(model)[key].tolist() == [2.0] * 16
    with pytest.raises(TypeError, match="PeftModel"):
        peft_state_dict_to_numpy(_base("llama"))


def test_bfloat16_payload_is_widened_and_restored():
    model = lora_with_norms("qwen2").to(torch.bfloat16)
    arrays = peft_state_dict_to_numpy(model)
    assert {array.dtype for array in arrays.values()} == {np.dtype(np.float32)}
    load_numpy_into_peft_model(model, {key: value * 2 for key, value in arrays.items()})
    assert all(tensor.dtype == torch.bfloat16 for tensor in get_peft_model_state_dict(model).values())


def test_fedlns_screens_adapter_plus_norm_payloads_unchanged():
    """Global = the payload dict; clients' payloads after local steps; corrupted-target clients are rejected."""
    torch.manual_seed(0)
    global_model = lora_with_norms("llama")
    global_arrays = {key: value.copy() for key, value in peft_state_dict_to_numpy(global_model).items()}
    data = (torch.arange(8)[:, None] * 7 + torch.arange(12)[None, :]) % 64  # learnable: counting sequences
    payloads, counts = {}, {}
    for client in range(8):
        model = lora_with_norms("llama")
        load_numpy_into_peft_model(model, global_arrays)
        generator = torch.Generator().manual_seed(100 + client)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
        for _ in range(10):
            rows = data[torch.randint(0, 8, (4,), generator=generator)]
            targets = rows if client >= 2 else torch.randint(0, 64, rows.shape, generator=generator)
            loss = model(input_ids=rows, labels=targets).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        payloads[client] = {key: value.copy() for key, value in peft_state_dict_to_numpy(model).items()}
        counts[client] = 24

    screener = FedLNS.paper(selector=norm_selector(global_model), activation_threshold=8, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = screener.screen(global_arrays, payloads, counts)
    assert result.active
    assert set(result.rejected) == {0, 1}, result.explain()
    assert set(result.signature_keys) == set(norm_parameter_names(global_model))
    new_global = result.aggregate(global_arrays, payloads)
    assert list(new_global) == list(global_arrays)
    load_numpy_into_peft_model(global_model, new_global)  # the aggregate is a payload again
