import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedlns_core import FedLNS, NormSelector, ScreeningResult

NORM_KEYS = ("h.0.ln_1.weight", "h.0.ln_1.bias", "h.1.ln_2.weight")


def make_global(width=16):
    g = {key: np.full(width, 1.0 if key.endswith("weight") else 0.0, dtype=np.float32) for key in NORM_KEYS}
    g["h.0.mlp.weight"] = np.zeros((3, 3), dtype=np.float32)
    return g


def make_clients(global_params, ids, attackers=(), seed=0, shift=0.5, noise=0.01):
    rng = np.random.default_rng(seed)
    clients = {}
    for cid in ids:
        model = {}
        for key, value in global_params.items():
            delta = noise * rng.standard_normal(value.shape)
            if cid in attackers and key in NORM_KEYS:
                delta += shift
            model[key] = (value + delta).astype(value.dtype)
        clients[cid] = model
    return clients


def counts_for(ids, value=100.0):
    return {cid: value for cid in ids}


def screen_once(clients, threshold=0, **kwargs):
    screener = FedLNS.paper(activation_threshold=threshold, random_state=0, **kwargs)
    g = make_global()
    return screener, screener.screen(g, clients, counts_for(clients))


def test_attackers_rejected_benign_kept_and_weights():
    g = make_global()
    clients = make_clients(g, range(12), attackers={0, 5, 9})
    counts = {cid: 50.0 + cid for cid in clients}
    result = FedLNS.paper(activation_threshold=0, random_state=0).screen(g, clients, counts)
    assert result.active and result.n_components == 2
    assert set(result.rejected) == {0, 5, 9}
    assert all(reason.startswith("screened: high deviation (cluster median delta") for reason in
               result.rejected.values())
    assert result.retained == tuple(c for c in range(12) if c not in {0, 5, 9})
    total = sum(counts[c] for c in result.retained)
    assert result.weights == pytest.approx({c: counts[c] / total for c in result.retained})
    assert sum(result.weights.values()) == pytest.approx(1.0)
    assert set(result.scores) == set(clients) and set(result.labels) == set(clients)
    new = result.aggregate(g, clients)
    expected = sum(result.weights[c] * clients[c]["h.0.ln_1.bias"].astype(np.float64) for c in result.retained)
    np.testing.assert_allclose(new["h.0.ln_1.bias"], expected, atol=1e-6)
    assert new["h.0.ln_1.bias"].dtype == np.float32


def test_hold_warmup_keeps_global_and_aggregate_warmup_averages():
    g = make_global()
    clients = make_clients(g, range(4))
    held = FedLNS.paper(activation_threshold=10).screen(g, clients, counts_for(clients))
    assert not held.active and held.retained == () and held.rejected == {} and held.bank_size == 4
    unchanged = held.aggregate(g, clients)
    assert all(np.array_equal(unchanged[k], g[k]) and unchanged[k] is not g[k] for k in g)
    warm = FedLNS.paper(activation_threshold=10, warmup="aggregate").screen(g, clients, counts_for(clients))
    assert not warm.active and warm.retained == (0, 1, 2, 3)
    assert warm.weights == pytest.approx({c: 0.25 for c in range(4)})


def test_bank_is_refreshed_before_screening_and_activation_counts_distinct_ids():
    g = make_global()
    screener = FedLNS.paper(activation_threshold=6, random_state=0)
    assert not screener.screen(g, make_clients(g, [0, 1, 2]), counts_for([0, 1, 2])).active
    assert not screener.screen(g, make_clients(g, [1, 2, 3], seed=1), counts_for([1, 2, 3])).active
    result = screener.screen(g, make_clients(g, [4, 5], seed=2), counts_for([4, 5]))
    assert result.active and result.bank_size == 6 and screener.round_ == 3 and result.round == 2


@pytest.mark.parametrize("mutate, reason", [
    (lambda m: m.__setitem__("h.0.ln_1.weight", np.full(16, np.nan, np.float32)),
     "invalid: non-finite values in 'h.0.ln_1.weight'"),
    (lambda m: m.__setitem__("h.0.mlp.weight", np.array([[np.inf, 0, 0], [0, 0, 0], [0, 0, 0]])),
     "invalid: non-finite values in 'h.0.mlp.weight'"),
    (lambda m: m.pop("h.0.mlp.weight"), "invalid: missing key 'h.0.mlp.weight'"),
    (lambda m: m.__setitem__("extra.weight", np.zeros(2)), "invalid: unexpected key 'extra.weight'"),
    (lambda m: m.__setitem__("h.0.ln_1.bias", np.zeros(8)),
     "invalid: key 'h.0.ln_1.bias' has shape (8,), expected (16,)"),
    (lambda m: m.__setitem__("h.0.ln_1.bias", np.array(["a"] * 16)), "invalid: key 'h.0.ln_1.bias' has unsupported dtype"),
])
def test_bad_client_is_rejected_with_reason_and_never_banked(mutate, reason):
    g = make_global()
    clients = make_clients(g, range(8))
    mutate(clients[3])
    screener = FedLNS.paper(activation_threshold=0, random_state=0)
    result = screener.screen(g, clients, counts_for(clients))
    assert result.rejected[3].startswith(reason)
    assert 3 not in result.retained and 3 not in screener.bank and len(screener.bank) == 7
    assert 3 not in result.scores
    result.aggregate(g, clients)       # the bad client does not break aggregation


@pytest.mark.parametrize("count, reason", [
    (0, "num_examples must be positive"), (-3, "num_examples must be positive"),
    (float("nan"), "not finite"), (float("inf"), "not finite"), ("12", "positive number"), (True, "positive number"),
])
def test_bad_counts_are_rejected(count, reason):
    g = make_global()
    clients = make_clients(g, range(5))
    counts = counts_for(clients)
    counts[2] = count
    result = FedLNS.paper(activation_threshold=0, random_state=0).screen(g, clients, counts)
    assert reason in result.rejected[2] and 2 not in result.retained


def test_ids_without_count_or_model_are_rejected():
    g = make_global()
    clients = make_clients(g, range(5))
    counts = counts_for(range(1, 6))
    result = FedLNS.paper(activation_threshold=0, random_state=0).screen(g, clients, counts)
    assert result.rejected[0] == "invalid: no num_examples for this client"
    assert result.rejected[5] == "invalid: num_examples given but no model"


def test_caller_errors_raise_with_specific_messages():
    g = make_global()
    clients = make_clients(g, range(3))
    bad_global = dict(g, **{"h.0.ln_1.bias": np.full(16, np.nan, np.float32)})
    with pytest.raises(ValueError, match="global_params: key 'h.0.ln_1.bias' has non-finite"):
        FedLNS.paper().screen(bad_global, clients, counts_for(clients))
    with pytest.raises(ValueError, match="matched none"):
        FedLNS.paper(selector=NormSelector(patterns=["nothing"])).screen(g, clients, counts_for(clients))
    with pytest.raises(TypeError, match="unsupported type float"):
        FedLNS.paper().screen(g, {1.5: clients[0]}, {1.5: 10})
    with pytest.raises(ValueError, match="warmup"):
        FedLNS.paper(warmup="later").screen(g, clients, counts_for(clients))
    with pytest.raises(ValueError, match="screening could never start"):
        FedLNS.paper(max_clients=5, activation_threshold=10).screen(g, clients, counts_for(clients))
    with pytest.raises(ValueError, match="n_init"):
        FedLNS.paper(n_init=0).screen(g, clients, counts_for(clients))


def test_edge_rounds():
    g = make_global()
    screener = FedLNS.paper(activation_threshold=0, random_state=0)
    empty = screener.screen(g, {}, {})
    assert empty.active and empty.retained == () and empty.n_components is None
    assert all(np.array_equal(v, g[k]) for k, v in empty.aggregate(g, {}).items())
    one = screener.screen(g, make_clients(g, ["solo"]), {"solo": 5})
    assert one.retained == ("solo",) and one.n_components == 1 and one.bic is None
    two = FedLNS.paper(activation_threshold=0, random_state=0).screen(g, make_clients(g, [1, 2]), counts_for([1, 2]))
    assert len(two.retained) >= 1 and set(two.retained) | set(two.rejected) == {1, 2}
    same_model = make_clients(g, [0])[0]
    identical = FedLNS.paper(activation_threshold=0, random_state=0).screen(
        g, {c: same_model for c in range(6)}, counts_for(range(6)))
    assert identical.retained == tuple(range(6)) and identical.n_components == 1
    assert all(np.isfinite(list(identical.scores.values())))


def test_integer_and_half_precision_parameters():
    g = make_global()
    g["h.0.ln_1.weight"] = g["h.0.ln_1.weight"].astype(np.float16)
    g["step"] = np.array(7)
    clients = make_clients(g, range(6), attackers={1})
    for model in clients.values():
        model["step"] = np.array(8)
    screener = FedLNS.paper(activation_threshold=0, random_state=0)
    result = screener.screen(g, clients, counts_for(clients))
    new = result.aggregate(g, clients)
    assert new["h.0.ln_1.weight"].dtype == np.float16 and new["step"].dtype == g["step"].dtype
    assert int(new["step"]) == 8


@settings(max_examples=15)
@given(st.permutations(list(range(10)) + ["x", "y"]), st.randoms(use_true_random=False))
def test_decisions_do_not_depend_on_client_or_key_order(order, shuffler):
    g = make_global()
    clients = make_clients(g, list(range(10)) + ["x", "y"], attackers={2, "x", 7})
    counts = {cid: 10.0 + (hash(str(cid)) % 7) for cid in clients}
    reference = FedLNS.paper(activation_threshold=0, random_state=3).screen(g, clients, counts)
    keys = list(g)
    shuffler.shuffle(keys)
    shuffled_global = {k: g[k] for k in keys}
    shuffled_clients = {cid: {k: clients[cid][k] for k in reversed(keys)} for cid in order}
    shuffled_counts = {cid: counts[cid] for cid in reversed(order)}
    result = FedLNS.paper(activation_threshold=0, random_state=3).screen(shuffled_global, shuffled_clients, shuffled_counts)
    assert set(result.retained) == set(reference.retained)
    assert result.retained == tuple(cid for cid in order if cid in reference.retained)   # input order
    assert result.rejected == reference.rejected and result.bic == reference.bic
    assert result.scores == reference.scores


@settings(max_examples=10)
@given(st.integers(4, 14), st.sets(st.integers(0, 13), max_size=5), st.integers(0, 100))
def test_retained_is_a_subset_with_weights_summing_to_one(n_clients, attackers, seed):
    g = make_global()
    clients = make_clients(g, range(n_clients), attackers=attackers, seed=seed)
    result = FedLNS.paper(activation_threshold=0, random_state=seed).screen(g, clients, counts_for(clients))
    assert result.retained and set(result.retained) <= set(clients)
    assert set(result.retained).isdisjoint(result.rejected)
    assert set(result.retained) | set(result.rejected) == set(clients)
    assert sum(result.weights.values()) == pytest.approx(1.0)


def test_deterministic_for_a_random_state_and_json_serialisable():
    g = make_global()
    clients = make_clients(g, range(10), attackers={1, 2, 3}, noise=0.2, shift=0.1)
    first = FedLNS.paper(activation_threshold=0, random_state=11).screen(g, clients, counts_for(clients))
    second = FedLNS.paper(activation_threshold=0, random_state=11).screen(g, clients, counts_for(clients))
    assert first == second
    decoded = json.loads(json.dumps(first.to_dict()))
    assert decoded["retained"] == list(first.retained) and decoded["round"] == 0
    assert "explain" not in decoded and "round 0" in first.explain()


@settings(max_examples=12)
@given(st.lists(st.sets(st.integers(0, 15), min_size=1, max_size=6), min_size=1, max_size=4),
       st.integers(0, 2**31 - 1), st.sampled_from([0.0, 0.25]), st.sampled_from(["auto", "paper"]),
       st.sets(st.integers(0, 9), max_size=3))
def test_save_load_gives_the_same_next_decision(tmp_path_factory, history, seed, ema, match, attackers):
    g = make_global()
    screener = FedLNS.paper(activation_threshold=8, random_state=seed, ema=ema, selector=NormSelector(match=match))
    for round_index, ids in enumerate(history):
        screener.screen(g, make_clients(g, sorted(ids), seed=round_index), counts_for(ids))
    path = tmp_path_factory.mktemp("state") / "nested" / "fedlns.npz"
    screener.save(path)
    loaded = FedLNS.load(path)
    assert loaded.get_params() == screener.get_params() and loaded.round_ == len(history)
    assert loaded.bank.ids == screener.bank.ids
    nxt = make_clients(g, range(10), attackers=attackers, seed=99)
    assert loaded.screen(g, nxt, counts_for(nxt)) == screener.screen(g, nxt, counts_for(nxt))


def test_load_rejects_foreign_and_corrupt_screener_files(tmp_path):
    bank_file = tmp_path / "bank.npz"
    FedLNS.paper().bank.save(bank_file)
    with pytest.raises(ValueError, match="expected 'screener'"):
        FedLNS.load(bank_file)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match="corrupt"):
        FedLNS.load(broken)


def test_rule_composes_with_another_aggregator():
    g = make_global()
    clients = make_clients(g, range(9), attackers={4})
    result = FedLNS.paper(activation_threshold=0, random_state=0).screen(g, clients, counts_for(clients))
    seen = {}

    def coordinate_median(updates, num_examples):
        seen.update(ids=set(updates), counts=num_examples)
        return {k: np.median([u[k] for u in updates.values()], axis=0) for k in g}
    new = result.aggregate(g, clients, aggregator=coordinate_median)
    assert seen["ids"] == set(result.retained) and 4 not in seen["ids"]
    expected = np.median([clients[c]["h.0.ln_1.bias"] for c in result.retained], axis=0)
    np.testing.assert_allclose(new["h.0.ln_1.bias"], expected, atol=1e-6)
    with pytest.raises(ValueError, match="exactly the global model's keys"):
        result.aggregate(g, clients, aggregator=lambda updates, counts: {})
    with pytest.warns(FutureWarning, match="aggregator="):      # the keyword's former name still works
        old = result.aggregate(g, clients, rule=coordinate_median)
    assert all(np.array_equal(old[k], new[k]) for k in g)
    # weighted_average's order (global, clients, weights) does not carry over: the counts are the screen's
    with pytest.raises(TypeError, match="got dict \\(the weights are the screened round's num_examples"):
        result.aggregate(g, clients, counts_for(clients))


def test_inputs_are_never_mutated():
    g = make_global()
    clients = make_clients(g, range(8), attackers={2})
    counts = counts_for(clients)
    frozen = {c: {k: v.copy() for k, v in m.items()} for c, m in clients.items()}
    frozen_global = {k: v.copy() for k, v in g.items()}
    result = FedLNS.paper(activation_threshold=0, random_state=0).screen(g, clients, counts)
    result.aggregate(g, clients)
    assert all(np.array_equal(frozen[c][k], clients[c][k]) for c in clients for k in g)
    assert all(np.array_equal(frozen_global[k], g[k]) for k in g) and counts == counts_for(range(8))
    assert isinstance(result, ScreeningResult)
    with pytest.raises(AttributeError):
        result.retained = ()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_value_deep_in_a_large_array_is_found(dtype, bad):
    g = make_global()
    g["wte.weight"] = np.full((400, 300), 1e3, dtype=dtype)          # large: takes the one-pass probe
    clients = make_clients(g, range(6))
    clients[4]["wte.weight"] = clients[4]["wte.weight"].copy()
    clients[4]["wte.weight"][399, 299] = bad
    clients[5]["wte.weight"] = np.full((400, 300), np.finfo(dtype).max / 2, dtype=dtype)  # finite, overflows the probe
    result = FedLNS.paper(activation_threshold=0, random_state=0).screen(g, clients, counts_for(clients))
    assert result.rejected[4] == "invalid: non-finite values in 'wte.weight'"
    assert 5 not in result.rejected or not result.rejected[5].startswith("invalid")


def test_validate_params_changes_nothing():
    screener = FedLNS.paper(activation_threshold=2)
    bank = screener.bank
    screener.ema = 0.5
    assert screener.validate_params()["ema"] == 0.5
    assert bank.ema == 0.0                              # only checked
    rng = np.random.default_rng(0)
    clients = {i: {"h.0.ln_1.weight": 1 + 0.01 * rng.standard_normal(4)} for i in range(3)}
    screener.screen({"h.0.ln_1.weight": np.ones(4)}, clients, {i: 1 for i in clients})
    assert bank.ema == 0.5                              # in use from the next screened round


def test_a_state_file_from_before_the_retain_rule_loads_as_the_paper_rule(tmp_path):
    from fedlns_core._io import read_state, write_state
    from fedlns_core._bank import HistoryBank

    screener = FedLNS.paper(activation_threshold=2, selector=NormSelector())
    rng = np.random.default_rng(1)
    clients = {i: {"h.0.ln_1.weight": 1 + 0.01 * rng.standard_normal(4)} for i in range(3)}
    screener.screen({"h.0.ln_1.weight": np.ones(4)}, clients, {i: 1 for i in clients})
    screener.save(tmp_path / "new.npz")
    header, arrays = read_state(tmp_path / "new.npz", "screener",
                                lambda h: HistoryBank._expected_arrays(h.get("bank")))
    for name in ("retain_rule", "warmup", "clip"):     # settings the older files do not have
        del header["params"][name]
    selector = header["params"]["selector"]
    header["params"]["selector"] = {"rule": selector.pop("match"), **selector}     # its older field name
    header = {k: v for k, v in header.items() if k not in ("format", "kind", "version")}
    write_state(tmp_path / "old.npz", "screener", header, arrays)
    loaded = FedLNS.load(tmp_path / "old.npz")
    assert (loaded.retain_rule, loaded.warmup, loaded.clip, loaded.selector.match) == ("paper", "hold", None, "auto")
    assert loaded.screen({"h.0.ln_1.weight": np.ones(4)}, clients, {i: 1 for i in clients}).active
