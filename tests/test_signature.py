import numpy as np
import pytest

from fedlns_core import NormSelector, extract_signature

GPT2 = [
    "transformer.wte.weight", "transformer.wpe.weight",
    *[f"transformer.h.{i}.{part}" for i in range(2) for part in (
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
        "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
        "mlp.c_proj.weight", "mlp.c_proj.bias")],
    "transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight",
]
BERT = [
    "bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
    "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
    "bert.embeddings.LayerNorm.bias", "bert.encoder.layer.0.attention.self.query.weight",
    "bert.encoder.layer.0.attention.self.key.bias", "bert.encoder.layer.0.attention.output.dense.weight",
    "bert.encoder.layer.0.attention.output.LayerNorm.weight", "bert.encoder.layer.0.attention.output.LayerNorm.bias",
    "bert.encoder.layer.0.intermediate.dense.weight", "bert.encoder.layer.0.output.dense.bias",
    "bert.encoder.layer.0.output.LayerNorm.weight", "bert.encoder.layer.0.output.LayerNorm.bias",
    "cls.predictions.bias", "cls.predictions.transform.dense.weight",
    "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
]
LLAMA = [
    "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
    "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
    "model.norm.weight", "lm_head.weight",
]
T5 = [
    "shared.weight", "encoder.block.0.layer.0.SelfAttention.q.weight", "encoder.block.0.layer.0.layer_norm.weight",
    "encoder.block.0.layer.1.DenseReluDense.wi.weight", "encoder.block.0.layer.1.layer_norm.weight",
    "encoder.final_layer_norm.weight", "decoder.final_layer_norm.weight",
]
NORM12 = ["blocks.0.norm1.weight", "blocks.0.norm1.bias", "blocks.0.attn.qkv.weight", "blocks.0.norm2.weight",
          "blocks.0.mlp.fc1.weight", "norm.weight", "head.weight"]


def expected(names, norm_words):
    return tuple(n for n in names if any(w in n for w in norm_words))


@pytest.mark.parametrize("names, markers", [
    (GPT2, (".ln_1.", ".ln_2.", ".ln_f.")),
    (BERT, (".LayerNorm.",)),
    (LLAMA, ("layernorm.", "model.norm.")),
    (T5, ("layer_norm.",)),
    (NORM12, ("norm1.", "norm2.", "norm.weight")),
])
def test_auto_match_selects_exactly_the_norm_parameters(names, markers):
    assert NormSelector().select(names) == expected(names, markers)


def test_auto_match_is_case_insensitive_and_keeps_order():
    names = ["B.LAYERNORM.WEIGHT", "a.ln_f.Bias", "x.weight"]
    assert NormSelector().select(names) == ("B.LAYERNORM.WEIGHT", "a.ln_f.Bias")


def test_auto_match_rejects_lookalikes():
    lookalikes = ["normalizer.weight", "kiln.weight", "lnx.bias", "ln_1.running_mean", "c_proj.bias",
                  "transformer.wte.weight", "ln_1", "model.norm.scale_factor"]
    with pytest.raises(ValueError, match="matched none"):
        NormSelector().select(lookalikes)


def test_paper_match_misses_final_rmsnorm_that_auto_keeps():
    paper = NormSelector(match="paper").select(LLAMA)
    assert "model.norm.weight" not in paper
    assert set(NormSelector().select(LLAMA)) - set(paper) == {"model.norm.weight"}
    assert NormSelector(match="paper").select(GPT2) == NormSelector().select(GPT2)


def test_the_old_keyword_rule_still_selects_with_a_warning():
    with pytest.warns(FutureWarning, match="match="):
        old = NormSelector(rule="paper")
    assert old.match == "paper" and old.select(LLAMA) == NormSelector(match="paper").select(LLAMA)


def test_patterns_and_keys():
    assert NormSelector(patterns=[r"ln_f\."]).select(GPT2) == ("transformer.ln_f.weight", "transformer.ln_f.bias")
    keys = ["transformer.ln_f.bias", "transformer.h.0.ln_1.weight"]
    assert NormSelector(keys=keys).select(GPT2) == ("transformer.h.0.ln_1.weight", "transformer.ln_f.bias")
    with pytest.raises(ValueError, match="'nope' is not among"):
        NormSelector(keys=["nope"]).select(GPT2)
    with pytest.raises(ValueError, match="match must be one of 'auto', 'paper'"):
        NormSelector(match="magic").select(GPT2)
    with pytest.raises(TypeError, match="not a str"):
        NormSelector(patterns="ln").select(GPT2)


def test_extract_signature_is_float64_difference_and_does_not_mutate():
    g = {"a.ln_1.weight": np.array([1, 2], dtype=np.float16), "w": np.zeros(3)}
    c = {"a.ln_1.weight": np.array([1.5, 1], dtype=np.float16), "w": np.ones(3)}
    before = {k: v.copy() for k, v in c.items()}
    sig = extract_signature(g, c, ["a.ln_1.weight"])
    assert list(sig) == ["a.ln_1.weight"] and sig["a.ln_1.weight"].dtype == np.float64
    np.testing.assert_array_equal(sig["a.ln_1.weight"], [0.5, -1.0])
    assert all(np.array_equal(before[k], c[k]) for k in c)
    with pytest.raises(KeyError, match="missing from client_params"):
        extract_signature(g, {"w": np.ones(3)}, ["a.ln_1.weight"])


def test_flat_signature_is_the_concatenated_extract_signature():
    from fedlns_core._signature import flat_signature
    rng = np.random.default_rng(0)
    keys = ["b.ln.weight", "a.norm.weight", "c.ln.bias"]
    dtypes = [np.float32, np.float16, np.int64]
    global_params = {key: (10 * rng.standard_normal((3, 2))).astype(dtype) for key, dtype in zip(keys, dtypes)}
    client_params = {key: (value + 7 * rng.standard_normal(value.shape)).astype(value.dtype)
                     for key, value in global_params.items()}
    expected = np.concatenate([part.ravel() for part in extract_signature(global_params, client_params, keys).values()])
    out = np.full(18, np.nan)
    assert flat_signature(global_params, client_params, keys, out=out) is out
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(flat_signature(global_params, client_params, keys), expected)
    with pytest.raises(ValueError, match="out must be a float64 array of shape"):
        flat_signature(global_params, client_params, keys, out=np.empty(17))
    with pytest.raises(ValueError, match="has shape"):
        flat_signature(global_params, {**client_params, "a.norm.weight": np.ones(6)}, keys)
    with pytest.raises(KeyError, match="missing from client_params"):
        flat_signature(global_params, {}, keys)
