"""FedLNS(signature=...): the LoRA-native signature, the norm signature and the automatic choice between them."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.stats import ortho_group

from fedlns_core import FedLNS
from fedlns_core._lora import lora_pairs

MODULES = ("layers.0.q_proj", "layers.0.v_proj", "layers.1.q_proj")


def lora_payload(rng, r=4, d_in=12, d_out=10, adapter=""):
    """A PEFT-style payload: per module A (r, d_in) and B (d_out, r)."""
    out = {}
    for module in MODULES:
        out[f"{module}.lora_A{adapter}.weight"] = rng.normal(size=(r, d_in)).astype(np.float32)
        out[f"{module}.lora_B{adapter}.weight"] = (0.1 * rng.normal(size=(d_out, r))).astype(np.float32)
    return out


def with_norms(payload, rng, width=12):
    return {**payload, "layers.0.input_layernorm.weight": np.ones(width, np.float32),
            "layers.1.input_layernorm.weight": np.ones(width, np.float32)}


def moved(payload, rng, scale, keys=None):
    return {k: (v + scale * rng.normal(size=v.shape)).astype(v.dtype) if keys is None or k in keys else v.copy()
            for k, v in payload.items()}


def test_the_lora_signature_is_the_column_norms_of_dA_and_the_row_norms_of_dB():
    """Oracle: every entry against norms computed here by hand, one direction at a time."""
    rng = np.random.default_rng(0)
    g = lora_payload(rng)
    client = {k: v.astype(np.float64) for k, v in g.items()}
    client["layers.0.q_proj.lora_A.weight"][:, 3] += [3.0, 4.0, 0.0, 0.0]      # column 3 of A moves by 5
    client["layers.1.q_proj.lora_B.weight"][7] += [0.0, 6.0, 8.0, 0.0]         # row 7 of B moves by 10
    keys, rows = FedLNS(signature="lora").client_signatures(g, {"c": client})
    assert keys == tuple(sorted([f"{m}.lora_A.weight column norms" for m in MODULES]
                                + [f"{m}.lora_B.weight row norms" for m in MODULES]))
    expected = []
    for key in keys:
        factor, statistic = key.split(" ", 1)
        change = client[factor] - g[factor].astype(np.float64)
        if statistic == "column norms":
            expected += [np.sqrt(sum(change[i, j] ** 2 for i in range(change.shape[0])))
                         for j in range(change.shape[1])]
        else:
            expected += [np.sqrt(sum(change[i, j] ** 2 for j in range(change.shape[1])))
                         for i in range(change.shape[0])]
    np.testing.assert_allclose(rows["c"], expected, rtol=1e-12, atol=1e-6)
    assert np.count_nonzero(rows["c"]) == 2


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.01, 100))
def test_rank_space_rotations_leave_it_and_scaling_the_change_scales_it(seed, factor):
    """dA -> Q dA, dB -> dB Q^T (Q orthogonal, the same adapter product's change up to rotation) changes no entry;
    c x the change gives c x the signature."""
    rng = np.random.default_rng(seed)
    g = {k: v.astype(np.float64) for k, v in lora_payload(rng).items()}
    step = {k: rng.normal(size=v.shape) for k, v in g.items()}
    q = ortho_group.rvs(4, random_state=seed)
    rotated = {k: g[k] + (q @ step[k] if ".lora_A." in k else step[k] @ q.T) for k in g}
    screener = FedLNS(signature="lora")
    _, rows = screener.client_signatures(g, {"plain": {k: g[k] + step[k] for k in g}, "rotated": rotated,
                                             "scaled": {k: g[k] + factor * step[k] for k in g}})
    np.testing.assert_allclose(rows["rotated"], rows["plain"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(rows["scaled"], factor * rows["plain"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("adapter", ["", ".default"])
def test_auto_finds_lora_factors_with_or_without_the_adapter_name(adapter):
    rng = np.random.default_rng(1)
    g = lora_payload(rng, adapter=adapter)
    assert len(lora_pairs(g)) == len(MODULES)
    result = FedLNS(activation_threshold=0, random_state=0).screen(g, {c: moved(g, rng, 0.01) for c in range(4)},
                                                                   {c: 1 for c in range(4)})
    assert result.signature == "lora" and all(key.endswith("norms") for key in result.signature_keys)


@pytest.mark.parametrize("adapter", ["", ".default"])
def test_peft_embedding_and_adalora_factors_are_pairs_too(adapter):
    """PEFT's other names of the same (r, d_in) and (d_out, r) factors: a LoRA embedding (``lora_embedding_A``, one
    column per token) and AdaLoRA (``lora_A`` without ``.weight``); payload names and state-dict names alike."""
    rng = np.random.default_rng(5)
    g = {f"embed.lora_embedding_A{adapter}": rng.normal(size=(4, 50)).astype(np.float32),
         f"embed.lora_embedding_B{adapter}": rng.normal(size=(8, 4)).astype(np.float32),
         f"q.lora_A{adapter}": rng.normal(size=(3, 8)).astype(np.float32),
         f"q.lora_B{adapter}": rng.normal(size=(6, 3)).astype(np.float32),
         f"q.lora_E{adapter}": np.ones((3, 1), np.float32),
         "embed.lora_embedding_A_other": np.zeros((4, 50), np.float32)}   # not a factor's name
    assert lora_pairs(g) == [(f"embed.lora_embedding_A{adapter}", f"embed.lora_embedding_B{adapter}"),
                             (f"q.lora_A{adapter}", f"q.lora_B{adapter}")]
    client = {k: v.copy() for k, v in g.items()}
    client[f"embed.lora_embedding_A{adapter}"][:, 17] += [0.0, 3.0, 4.0, 0.0]   # token 17's column moves by 5
    keys, rows = FedLNS(signature="lora").client_signatures(g, {"c": client})
    assert keys == (f"embed.lora_embedding_A{adapter} column norms", f"embed.lora_embedding_B{adapter} row norms",
                    f"q.lora_A{adapter} column norms", f"q.lora_B{adapter} row norms")
    assert rows["c"].shape == (50 + 8 + 8 + 6,) and np.flatnonzero(rows["c"]).tolist() == [17]
    assert rows["c"][17] == pytest.approx(5.0)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([(3,), (3, 3), (1, 2, 2)]))
def test_a_convolutions_factors_read_as_their_matrices(seed, kernel):
    """PEFT's LoRA on a convolution sends A as (r, c_in, *kernel) and B as (c_out, r, 1, ...): its signature is the
    signature of the same factors flattened to (r, c_in * kernel) and (c_out, r), one column norm per input channel
    and kernel position, in the same order, and the bank reads such a payload again after a save."""
    rng = np.random.default_rng(seed)
    r, c_in, c_out = 4, 3, 5
    conv = {"conv.lora_A.weight": rng.normal(size=(r, c_in, *kernel)).astype(np.float32),
            "conv.lora_B.weight": rng.normal(size=(c_out, r, *(1 for _ in kernel))).astype(np.float32)}
    flat = {key: value.reshape(value.shape[0], -1) for key, value in conv.items()}
    client = {key: value + rng.normal(size=value.shape).astype(np.float32) for key, value in conv.items()}
    keys, rows = FedLNS(signature="lora").client_signatures(conv, {"c": client})
    flat_keys, flat_rows = FedLNS(signature="lora").client_signatures(
        flat, {"c": {key: value.reshape(value.shape[0], -1) for key, value in client.items()}})
    assert keys == flat_keys and rows["c"].shape == (c_in * int(np.prod(kernel)) + c_out,)
    np.testing.assert_array_equal(rows["c"], flat_rows["c"])
    bad = {**conv, "conv.lora_B.weight": conv["conv.lora_B.weight"].reshape(c_out, r)}    # B flattened, A not
    with pytest.raises(ValueError, match="nor a convolution's"):
        lora_pairs(bad)


def test_auto_uses_both_when_norms_are_trained_and_lora_alone_when_they_come_back_unchanged():
    rng = np.random.default_rng(2)
    g = with_norms(lora_payload(rng), rng)
    counts = {c: 1 for c in range(6)}
    trained = FedLNS(activation_threshold=0).screen(g, {c: moved(g, rng, 0.01) for c in counts}, counts)
    assert trained.signature == "lora+norm"
    assert "layers.0.input_layernorm.weight" in trained.signature_keys
    lora_keys = [k for k in g if "lora" in k]
    frozen = FedLNS(activation_threshold=0).screen(g, {c: moved(g, rng, 0.01, lora_keys) for c in counts}, counts)
    assert frozen.signature == "lora"
    norms_only = {k: v for k, v in g.items() if "lora" not in k}
    plain = FedLNS(activation_threshold=0).screen(norms_only, {c: moved(norms_only, rng, 0.01) for c in counts},
                                                  counts)
    assert plain.signature == "norm"


def test_auto_keeps_the_banks_signature_once_it_has_one():
    """One choice per screener: a later round whose attackers touch the frozen norms does not change the layout."""
    rng = np.random.default_rng(3)
    g = with_norms(lora_payload(rng), rng)
    lora_keys = [k for k in g if "lora" in k]
    screener = FedLNS(activation_threshold=4, random_state=0)
    first = screener.screen(g, {c: moved(g, rng, 0.01, lora_keys) for c in range(6)}, {c: 1 for c in range(6)})
    second = screener.screen(g, {c: moved(g, rng, 0.01) for c in range(6, 12)}, {c: 1 for c in range(6, 12)})
    assert first.signature == second.signature == "lora"
    assert second.signature_keys == first.signature_keys


def test_a_payload_without_what_was_asked_for_is_a_clear_error():
    rng = np.random.default_rng(4)
    g = lora_payload(rng)
    norms_only = {"h.0.ln_1.weight": np.ones(3)}
    with pytest.raises(ValueError, match="signature='lora' needs LoRA factors"):
        FedLNS(signature="lora").screen(norms_only, {1: norms_only}, {1: 1})
    with pytest.raises(ValueError, match="matched none"):
        FedLNS(signature="norm").screen(g, {1: g}, {1: 1})
    with pytest.raises(ValueError, match="signature='auto' found neither"):
        FedLNS().screen({"w": np.zeros(3)}, {1: {"w": np.ones(3)}}, {1: 1})
    bad = {**g, "layers.0.q_proj.lora_B.weight": np.zeros((10, 3), np.float32)}      # rank 3 against A's 4
    with pytest.raises(ValueError, match="are not \\(r, d_in\\) and \\(d_out, r\\)"):
        FedLNS(signature="lora").screen(bad, {1: bad}, {1: 1})
    with pytest.raises(ValueError, match="signature must be one of 'auto', 'norm', 'lora'"):
        FedLNS(signature="lora_stats").validate_params()


def test_attackers_that_move_their_adapters_far_more_are_rejected_and_the_entry_named():
    """The default rule on a LoRA-only payload; one attacker changes a single module a lot."""
    rng = np.random.default_rng(5)
    g = lora_payload(rng)
    screener = FedLNS(activation_threshold=12, random_state=0)
    for start in range(0, 24, 12):                                       # a bank of honest rounds first
        screener.screen(g, {c: moved(g, rng, 0.01) for c in range(start, start + 12)},
                        {c: 1 for c in range(start, start + 12)})
    sent = {c: moved(g, rng, 0.01) for c in range(24, 33)}
    sent[33] = moved(g, rng, 0.5, ["layers.1.q_proj.lora_B.weight"])
    result = screener.screen(g, sent, {c: 1 for c in sent})
    assert result.active and list(result.rejected) == [33], result.explain()
    assert result.deviant_entries[33] == "layers.1.q_proj.lora_B.weight row norms"
    assert "largest deviation in layers.1.q_proj.lora_B.weight row norms" in result.explain()
    assert result.rejected[33].startswith("screened: loud LoRA change (delta"), result.rejected[33]
    merged = result.aggregate(g, sent)
    assert set(merged) == set(g)                                        # the real payloads are aggregated


def test_signature_and_bank_survive_save_and_load(tmp_path):
    rng = np.random.default_rng(6)
    g = lora_payload(rng)
    screener = FedLNS(activation_threshold=6, random_state=0)
    screener.screen(g, {c: moved(g, rng, 0.01) for c in range(8)}, {c: 1 for c in range(8)})
    screener.save(tmp_path / "s.npz")
    loaded = FedLNS.load(tmp_path / "s.npz")
    assert loaded.signature == "auto" and loaded.bank.keys == screener.bank.keys
    sent = {c: moved(g, rng, 0.01) for c in range(8, 14)}
    one, two = (s.screen(g, sent, {c: 1 for c in sent}) for s in (screener, loaded))
    assert one.to_dict() == two.to_dict()


@settings(max_examples=10, deadline=None)
@given(st.permutations(range(8)))
def test_decisions_do_not_depend_on_client_order(order):
    rng = np.random.default_rng(7)
    g = lora_payload(rng)
    sent = {c: moved(g, rng, 0.01 if c < 6 else 0.3) for c in range(8)}
    results = [FedLNS.paper(signature="lora", activation_threshold=0, random_state=0).screen(
        g, {c: sent[c] for c in ids}, {c: 1 for c in ids}) for ids in (range(8), order)]
    assert set(results[0].rejected) == set(results[1].rejected) == {6, 7}
    assert results[0].scores == pytest.approx(results[1].scores)
