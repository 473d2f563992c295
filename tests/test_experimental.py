"""fedlns_core.experimental: the LoRA-native signature for payloads with frozen norms."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlns_core import FedLNS
from fedlns_core.experimental import lora_selector, lora_signature


def _payload(rng, modules=("a", "b"), r=2, d_in=5, d_out=3):
    out = {}
    for m in modules:
        out[f"{m}.lora_A.weight"] = rng.normal(size=(r, d_in)).astype(np.float32)
        out[f"{m}.lora_B.weight"] = rng.normal(size=(d_out, r)).astype(np.float32)
        out[f"{m}.base_layer.bias"] = rng.normal(size=d_out)      # not LoRA: ignored
    return out


def test_each_direction_of_the_change_is_measured_once():
    rng = np.random.default_rng(0)
    g = _payload(rng)
    moved = {k: v.copy() for k, v in g.items()}
    moved["a.lora_A.weight"][:, 1] += np.array([3.0, 4.0], dtype=np.float32)   # column 1 of A moves by 5
    moved["b.lora_B.weight"][2] += np.array([6.0, 8.0], dtype=np.float32)      # row 2 of B moves by 10
    zeros, views = lora_signature(g, {"x": moved, "y": g})
    assert sorted(zeros) == ["a.lora_signature.A", "a.lora_signature.B", "b.lora_signature.A", "b.lora_signature.B"]
    assert all(z.shape == views["x"][k].shape and not z.any() for k, z in zeros.items())
    np.testing.assert_allclose(views["x"]["a.lora_signature.A"], [0, 5, 0, 0, 0], atol=1e-6)
    np.testing.assert_allclose(views["x"]["b.lora_signature.B"], [0, 0, 10], atol=1e-6)
    assert not views["x"]["a.lora_signature.B"].any() and not any(v.any() for v in views["y"].values())
    assert sorted(lora_selector().select(zeros)) == sorted(zeros)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 100))
def test_the_signature_ignores_a_common_shift_and_scales_with_the_change(seed, factor):
    # a client's view depends only on its change from the global adapters, and grows linearly with it
    rng = np.random.default_rng(seed)
    g = {k: v.astype(np.float64) for k, v in _payload(rng).items()}
    step = {k: rng.normal(size=v.shape) for k, v in g.items()}
    shifted = {k: v + 7.0 for k, v in g.items()}
    base = lora_signature(g, {1: {k: g[k] + step[k] for k in g}})[1][1]
    moved = lora_signature(shifted, {1: {k: shifted[k] + step[k] for k in g}})[1][1]
    scaled = lora_signature(g, {1: {k: g[k] + factor * step[k] for k in g}})[1][1]
    for key in base:
        np.testing.assert_allclose(moved[key], base[key], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(scaled[key], factor * base[key], rtol=1e-9, atol=1e-9)


def test_clients_that_move_their_adapters_far_more_are_rejected():
    rng = np.random.default_rng(1)
    g = _payload(rng)
    sent = {c: {k: v + 0.01 * rng.normal(size=v.shape) for k, v in g.items()} for c in range(12)}
    sent.update({c: {k: v + 0.3 * rng.normal(size=v.shape) for k, v in g.items()} for c in (12, 13, 14)})
    result = FedLNS.paper(selector=lora_selector(), activation_threshold=0, random_state=0).screen(*lora_signature(g, sent), {c: 1 for c in sent})
    assert sorted(result.rejected) == [12, 13, 14]
    merged = result.aggregate(g, sent)
    assert set(merged) == set(g)   # aggregated from the real payloads, not the signature view


@pytest.mark.parametrize("global_params, clients, message", [
    ({"ln.weight": np.ones(2)}, {1: {"ln.weight": np.ones(2)}}, "needs LoRA entries"),
    ({"m.lora_A.weight": np.ones((1, 2)), "m.lora_B.weight": np.ones((2, 1))},
     {1: {"m.lora_A.weight": np.ones((1, 2))}}, "did not send 'm.lora_B.weight'"),
    ({"m.lora_A.weight": np.ones((1, 2)), "m.lora_B.weight": np.ones((2, 1))},
     {1: {"m.lora_A.weight": np.ones((2, 2)), "m.lora_B.weight": np.ones((2, 1))}}, "has shape"),
])
def test_bad_payloads_are_refused_with_the_reason(global_params, clients, message):
    with pytest.raises(ValueError, match=message):
        lora_signature(global_params, clients)
