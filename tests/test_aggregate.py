import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays

from fedlns_core import apply_update, weighted_average

values = arrays(np.float64, (3,), elements=st.floats(-1e3, 1e3, allow_nan=False))


@given(values, st.lists(values, min_size=1, max_size=6), st.data())
def test_matches_eq_aggregation(global_value, client_values, data):
    weights = {i: data.draw(st.floats(0.1, 100)) for i in range(len(client_values))}
    out = weighted_average({"w": global_value}, {i: {"w": v} for i, v in enumerate(client_values)}, weights)
    total = sum(weights.values())
    expected = global_value + sum(weights[i] / total * (v - global_value) for i, v in enumerate(client_values))
    np.testing.assert_allclose(out["w"], expected, rtol=1e-9, atol=1e-9)


@given(values, values, st.lists(st.floats(0.1, 100), min_size=1, max_size=6))
def test_identical_updates_give_that_update(global_value, update, weights):
    clients = {i: {"w": global_value + update} for i in range(len(weights))}
    out = weighted_average({"w": global_value}, clients, dict(enumerate(weights)))
    np.testing.assert_allclose(out["w"], global_value + update, rtol=1e-9, atol=1e-9)


def test_dtypes_follow_the_global_model_and_inputs_are_untouched():
    g = {"h": np.array([1.0, 2.0], dtype=np.float16), "i": np.array([10, 20]), "f": np.zeros(2, np.float32)}
    clients = {"a": {"h": np.array([2.0, 2.0], np.float16), "i": np.array([11, 20]), "f": np.ones(2, np.float32)},
               "b": {"h": np.array([4.0, 2.0], np.float16), "i": np.array([14, 21]), "f": np.ones(2, np.float64)}}
    snapshot = {c: {k: v.copy() for k, v in p.items()} for c, p in clients.items()}
    out = weighted_average(g, clients, {"a": 1, "b": 1})
    assert {k: v.dtype for k, v in out.items()} == {"h": np.float16, "i": g["i"].dtype, "f": np.float32}
    np.testing.assert_array_equal(out["h"], [3.0, 2.0])
    np.testing.assert_array_equal(out["i"], [12, 20])      # 12.5 and 20.5 round half to even
    assert all(np.array_equal(snapshot[c][k], clients[c][k]) for c in clients for k in g)
    assert out["f"] is not clients["a"]["f"]


@pytest.mark.parametrize("weights, message", [
    ({}, "empty"), ({"a": 0}, "positive"), ({"a": -1}, "positive"), ({"a": float("nan")}, "positive"),
    ({"z": 1}, "no parameters"), ({True: 1}, "bool"),
])
def test_bad_weights(weights, message):
    with pytest.raises((ValueError, TypeError), match=message):
        weighted_average({"w": np.zeros(1)}, {"a": {"w": np.ones(1)}}, weights)


def test_shape_and_key_mismatch_and_bad_global():
    with pytest.raises(ValueError, match=r"client 'a': key 'w' has shape \(2,\), expected \(1,\)"):
        weighted_average({"w": np.zeros(1)}, {"a": {"w": np.ones(2)}}, {"a": 1})
    with pytest.raises(ValueError, match="missing key 'w'"):
        weighted_average({"w": np.zeros(1)}, {"a": {}}, {"a": 1})
    with pytest.raises(ValueError, match="non-finite"):
        weighted_average({"w": np.array([np.nan])}, {"a": {"w": np.ones(1)}}, {"a": 1})


def test_apply_update_adds_in_the_global_dtype_and_checks_keys_and_shapes():
    g = {"f": np.array([1.0, 2.0], np.float32), "i": np.array([10, 20])}
    out = apply_update(g, {"f": np.array([0.25, -1.0]), "i": np.array([0.5, 1.6])})
    assert out["f"].dtype == np.float32 and out["i"].dtype == g["i"].dtype
    np.testing.assert_array_equal(out["f"], [1.25, 1.0])
    np.testing.assert_array_equal(out["i"], [10, 22])      # 10.5 rounds half to even
    assert out["f"] is not g["f"]
    with pytest.raises(ValueError, match="exactly the global model's keys"):
        apply_update(g, {"f": np.zeros(2)})
    with pytest.raises(ValueError, match=r"shape \(3,\) for 'f', expected \(2,\)"):
        apply_update(g, {"f": np.zeros(3), "i": np.zeros(2)})
