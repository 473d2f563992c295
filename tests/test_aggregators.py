"""Tests for fedlns_sim.baselines: hand-computed cases, independent implementations
(Flower's server-side helpers, scikit-learn's HDBSCAN, brute-force loops) and properties."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fedlns_core import apply_update
from fedlns_sim.baselines import (
    AGGREGATOR_NAMES, AggregationResult, ClientDeltas, client_updates, coordinate_median, fedavg, flame,
    make_aggregator, multi_krum, norm_bounded_fedavg, paper_parameters, trimmed_count, trimmed_mean)
from fedlns_sim.baselines import _stack
from fedlns_sim.baselines._flame import cosine_distances, largest_cluster

SHAPES = {"h.0.ln_1.weight": (4,), "h.0.attn.c_attn.weight": (4, 3), "wte.weight": (5, 4)}


def random_updates(n_clients, seed=0, dtype=np.float32, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return {f"c{i}": {key: rng.standard_normal(shape).astype(dtype) for key, shape in shapes.items()}
            for i in range(n_clients)}


def flat(update):
    return np.concatenate([np.ravel(update[key]) for key in update])


def one_key(values):
    """Clients 0..n-1 with a single 1-D array each, from a list of lists."""
    return {i: {"w": np.asarray(v, dtype=np.float64)} for i, v in enumerate(values)}


def ones(updates):
    return {cid: 1.0 for cid in updates}


# ----------------------------------------------------------------------------- hand-computed


def test_fedavg_hand_computed_and_dtype_and_key_order():
    updates = {"a": {"z": np.array([1.0, 0.0], np.float32), "b": np.array([[2.0]], np.float32)},
               "b": {"b": np.array([[5.0]], np.float32), "z": np.array([4.0, 3.0], np.float32)}}
    out = fedavg(updates, {"a": 2, "b": 1})
    assert list(out) == ["z", "b"]  # first client's key order
    np.testing.assert_allclose(out["z"], [2.0, 1.0])
    np.testing.assert_allclose(out["b"], [[3.0]])
    assert out["z"].dtype == np.float32 and out["b"].shape == (1, 1)


def test_norm_bounded_fixed_bound_and_median_default():
    updates = one_key([[3.0, 4.0], [0.0, 1.0], [0.0, 0.0]])  # norms 5, 1, 0
    out = norm_bounded_fedavg(updates, {0: 1, 1: 1, 2: 2}, bound=2.0)
    # client 0 scaled by 2/5; weights 1/4, 1/4, 2/4
    np.testing.assert_allclose(out["w"], [0.25 * 1.2, 0.25 * 1.6 + 0.25 * 1.0])
    result = make_aggregator("norm_bounded_fedavg")(updates, {0: 1, 1: 1, 2: 2})
    assert result.details["bound"] == pytest.approx(1.0)  # median of (5, 1, 0)
    assert result.details["factors"] == {0: pytest.approx(0.2), 1: 1.0, 2: 1.0}
    np.testing.assert_allclose(result.update["w"], [0.25 * 0.6, 0.25 * 0.8 + 0.25])
    assert result.kept == (0, 1, 2) and not result.selects_clients


def test_norm_bounded_uses_the_norm_over_all_keys():
    updates = {0: {"a": np.array([3.0]), "b": np.array([4.0])}, 1: {"a": np.array([0.0]), "b": np.array([0.0])}}
    out = norm_bounded_fedavg(updates, {0: 1, 1: 1}, bound=1.0)
    np.testing.assert_allclose([out["a"][0], out["b"][0]], [0.3, 0.4])


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), "mean"])
def test_norm_bounded_rejects_bad_bound(bad):
    with pytest.raises(ValueError, match="bound"):
        norm_bounded_fedavg(one_key([[1.0]]), {0: 1}, bound=bad)


def test_coordinate_median_odd_and_even():
    odd = coordinate_median(one_key([[1.0, 9.0], [5.0, -3.0], [100.0, 0.0]]))
    np.testing.assert_array_equal(odd["w"], [5.0, 0.0])
    even = coordinate_median(one_key([[1.0], [5.0], [2.0], [100.0]]), None)
    np.testing.assert_array_equal(even["w"], [3.5])


def test_trimmed_mean_hand_computed():
    updates = one_key([[-50.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 6.0], [90.0, 9.0]])
    np.testing.assert_allclose(trimmed_mean(updates, trim_fraction=0.2)["w"], [2.0, 2.0])
    # zero trim is the plain unweighted mean
    np.testing.assert_allclose(trimmed_mean(updates, trim_fraction=0.0)["w"], [46 / 5, 3.0])


def test_trimmed_count_rounding():
    assert [trimmed_count(f, 20) for f in (0.0, 0.1, 0.2, 0.3, 0.4)] == [0, 2, 4, 6, 8]
    assert trimmed_count(0.29, 100) == 29  # 0.29 * 100 is 28.999999999999996 in binary
    assert trimmed_count(0.49, 3) == 1 and trimmed_count(0.3, 3) == 0
    with pytest.raises(ValueError, match="trim_fraction"):
        trimmed_count(0.5, 20)


def test_multi_krum_hand_computed_scores_and_selection():
    updates = one_key([[0.0], [1.0], [2.0], [30.0]])
    result = make_aggregator("multi_krum", f=1, m=3)(updates, ones(updates))
    # n - f - 2 = 1 nearest other: 1, 1, 1, 28^2
    assert result.details["scores"] == {0: 1.0, 1: 1.0, 2: 1.0, 3: 784.0}
    assert result.kept == (0, 1, 2) and result.rejected == (3,) and result.selects_clients
    np.testing.assert_allclose(result.update["w"], [1.0])
    # sample weighting of the selected updates is an option
    weighted = multi_krum(updates, {0: 1, 1: 1, 2: 2, 3: 100}, f=1, m=3, weighted=True)
    np.testing.assert_allclose(weighted["w"], [(0 + 1 + 4) / 4])


def test_multi_krum_small_rounds_and_ties():
    # one client: kept alone; m larger than n keeps everyone
    single = make_aggregator("multi_krum", f=8, m=12)(one_key([[2.0]]), {0: 1})
    assert single.kept == (0,)
    np.testing.assert_allclose(single.update["w"], [2.0])
    tied = make_aggregator("multi_krum", f=0, m=1)(one_key([[1.0], [-1.0]]), {0: 1, 1: 1})
    assert tied.kept == (0,)  # equal scores: input order decides
    assert tied.details["neighbours"] == 1


@pytest.mark.parametrize("params", [{"f": -1, "m": 2}, {"f": 1, "m": 0}, {"f": 1.5, "m": 2}])
def test_multi_krum_rejects_bad_parameters(params):
    with pytest.raises(ValueError, match="must be"):
        multi_krum(one_key([[1.0], [2.0]]), {0: 1, 1: 1}, **params)


def two_groups(n_major, n_minor, dim=40, seed=0):
    """n_major updates near +d and n_minor near a direction orthogonal to d; (updates, d)."""
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(dim)
    other = rng.standard_normal(dim)
    other -= other @ direction / (direction @ direction) * direction
    updates = {}
    for i in range(n_major):
        updates[f"b{i}"] = {"w": (1 + 0.1 * i) * direction + 0.05 * rng.standard_normal(dim)}
    for i in range(n_minor):
        updates[f"m{i}"] = {"w": 3 * other + 0.05 * rng.standard_normal(dim)}
    return updates, direction


def test_flame_keeps_majority_clips_and_averages_without_noise():
    updates, _ = two_groups(7, 3)
    result = make_aggregator("flame", noise_scale=0.0)(updates, ones(updates))
    # HDBSCAN may call a benign straggler noise too, but never keeps the minority direction
    assert len(result.kept) >= 5 and all(cid.startswith("b") for cid in result.kept)
    assert {"m0", "m1", "m2"} <= set(result.rejected) and result.selects_clients
    assert result.details["labels"]["m0"] != result.details["labels"][result.kept[0]]
    norms = np.array([np.linalg.norm(u["w"]) for u in updates.values()])
    median = np.median(norms)
    assert result.details["median_norm"] == pytest.approx(median)
    expected = np.mean([updates[cid]["w"] * min(1.0, median / np.linalg.norm(updates[cid]["w"]))
                        for cid in result.kept], axis=0)
    np.testing.assert_allclose(result.update["w"], expected, rtol=1e-12)


def test_flame_noise_scale_and_seed():
    updates, _ = two_groups(7, 3)
    clean = flame(updates, ones(updates), noise_scale=0.0)["w"]
    noisy = make_aggregator("flame", random_state=5)(updates, ones(updates))
    again = flame(updates, ones(updates), random_state=5)["w"]
    other = flame(updates, ones(updates), random_state=6)["w"]
    np.testing.assert_array_equal(noisy.update["w"], again)
    assert not np.array_equal(again, other)
    residual = noisy.update["w"] - clean
    sigma = 1e-3 * noisy.details["median_norm"]
    assert noisy.details["noise_sigma"] == pytest.approx(sigma)
    assert 0.5 * sigma < residual.std() < 1.5 * sigma  # 40 draws: loose on purpose


def test_flame_fallbacks_and_tiny_rounds():
    # mutually orthogonal updates are all equally far apart: one cluster of everyone
    updates = one_key(np.eye(4) * [1.0, 2.0, 3.0, 4.0])
    result = make_aggregator("flame", noise_scale=0.0)(updates, ones(updates))
    assert result.kept == (0, 1, 2, 3)
    np.testing.assert_allclose(result.update["w"], [0.25, 0.25 * 2.0, 0.25 * 2.5, 0.25 * 2.5])
    # all noise keeps everyone; otherwise the largest cluster, ties to the smaller label
    assert largest_cluster(np.array([-1, -1, -1])).tolist() == [0, 1, 2]
    assert largest_cluster(np.array([1, 0, 1, -1, 0])).tolist() == [1, 4]  # tie: label 0
    single = make_aggregator("flame", noise_scale=0.0)(one_key([[3.0, 4.0]]), {0: 1})
    assert single.kept == (0,)
    np.testing.assert_allclose(single.update["w"], [3.0, 4.0])


def test_cosine_distance_of_a_zero_update_is_one():
    distances = cosine_distances(np.array([[0.0, 0.0], [0.0, 4.0]]))
    np.testing.assert_array_equal(distances, [[0.0, 1.0], [1.0, 0.0]])


# ----------------------------------------------------------------------------- validation


def test_errors_name_the_client_and_key():
    good = random_updates(3)
    bad = copy.deepcopy(good)
    bad["c1"]["wte.weight"] = np.zeros((4, 5), np.float32)
    with pytest.raises(ValueError, match=r"client 'c1': key 'wte.weight' has shape \(4, 5\), expected \(5, 4\)"):
        fedavg(bad, ones(bad))
    bad = copy.deepcopy(good)
    del bad["c2"]["wte.weight"]
    with pytest.raises(ValueError, match=r"client 'c2': keys differ .*missing \['wte.weight'\]"):
        coordinate_median(bad)
    bad = copy.deepcopy(good)
    bad["c2"]["h.0.ln_1.weight"][1] = np.nan
    with pytest.raises(ValueError, match="client 'c2': key 'h.0.ln_1.weight' has non-finite values"):
        multi_krum(bad, ones(bad), f=0, m=3)
    assert np.isnan(fedavg(bad, ones(bad), check_finite=False)["h.0.ln_1.weight"][1])
    with pytest.raises(ValueError, match="client 'c0': no entry in num_examples"):
        fedavg(good, {"c1": 1, "c2": 1})
    with pytest.raises(ValueError, match="client 'c1': num_examples must be finite and > 0"):
        fedavg(good, {"c0": 1, "c1": 0, "c2": 1})
    with pytest.raises(ValueError, match="non-empty"):
        fedavg({}, {})
    with pytest.raises(ValueError, match="dtype complex128"):
        fedavg({0: {"w": np.array([1j])}}, {0: 1})


def test_registry_and_factory():
    assert AGGREGATOR_NAMES == ("fedavg", "norm_bounded_fedavg", "coordinate_median", "trimmed_mean",
                                "multi_krum", "flame")
    with pytest.raises(ValueError, match="unknown aggregator 'krum'"):
        make_aggregator("krum")
    with pytest.raises(TypeError, match=r"unknown parameters \['trim'\]"):
        make_aggregator("trimmed_mean", trim=0.1)
    with pytest.raises(TypeError, match=r"missing required parameters \['m'\]"):
        make_aggregator("multi_krum", f=2)
    updates = random_updates(5)
    rule = make_aggregator("trimmed_mean", trim_fraction=0.2)
    for key, value in rule(updates, ones(updates)).items():
        np.testing.assert_array_equal(value, trimmed_mean(updates, trim_fraction=0.2)[key])


def test_registry_lists_exactly_each_rules_keyword_parameters():
    import inspect

    from fedlns_sim.baselines._registry import _FUNCTIONS

    for name, entry in _FUNCTIONS.items():
        keywords = [p for p in inspect.signature(entry.function).parameters.values() if p.kind is p.KEYWORD_ONLY]
        assert list(entry.required) == [p.name for p in keywords if p.default is p.empty], name
        assert [*entry.optional, "check_finite"] == [p.name for p in keywords if p.default is not p.empty], name


def test_a_result_reads_as_its_update():
    updates = random_updates(3)
    result = fedavg(updates, ones(updates))
    assert isinstance(result, AggregationResult) and list(result) == list(SHAPES) and len(result) == 3
    assert all(result[key] is result.update[key] for key in SHAPES)
    assert result.kept == ("c0", "c1", "c2") and result.rejected == () and not result.selects_clients


def test_paper_parameters_match_the_table():
    table = {0.0: (0.0, 0, 20), 0.1: (0.1, 2, 18), 0.2: (0.2, 4, 16), 0.3: (0.3, 6, 14), 0.4: (0.4, 8, 12)}
    for fraction, (trim, f, m) in table.items():
        params = paper_parameters(fraction)
        assert params["trimmed_mean"]["trim_fraction"] == trim
        assert (params["multi_krum"]["f"], params["multi_krum"]["m"]) == (f, m)
    assert paper_parameters(0.25, 10)["multi_krum"] == {"f": 3, "m": 7}  # 2.5 rounds up
    with pytest.raises(ValueError, match="malicious_fraction"):
        paper_parameters(0.5)


def test_inputs_are_not_mutated_and_helpers_round_trip():
    global_params = {key: np.full(shape, 0.5, np.float32) for key, shape in SHAPES.items()}
    clients = {cid: {k: global_params[k] + v for k, v in u.items()} for cid, u in random_updates(4).items()}
    before = copy.deepcopy(clients)
    updates = {cid: dict(update) for cid, update in client_updates(global_params, clients).items()}
    for name in AGGREGATOR_NAMES:
        params = {"trimmed_mean": {"trim_fraction": 0.25}, "multi_krum": {"f": 1, "m": 2},
                  "flame": {"random_state": 0}}.get(name, {})
        snapshot = copy.deepcopy(updates)
        make_aggregator(name, **params)(updates, ones(updates))
        make_aggregator(name, **params)(client_updates(global_params, clients), ones(updates))
        for cid in updates:
            for key in updates[cid]:
                np.testing.assert_array_equal(updates[cid][key], snapshot[cid][key])
    for cid in clients:
        for key in clients[cid]:
            np.testing.assert_array_equal(clients[cid][key], before[cid][key])
    new = apply_update(global_params, fedavg(updates, ones(updates)))
    expected = np.mean([clients[c]["wte.weight"] for c in clients], axis=0)
    np.testing.assert_allclose(new["wte.weight"], expected, rtol=1e-6)
    assert new["wte.weight"].dtype == np.float32
    with pytest.raises(ValueError, match="client 'c1': key 'wte.weight' has shape"):
        client_updates(global_params, {"c1": {**clients["c1"], "wte.weight": np.zeros(3)}})


@pytest.mark.parametrize("block_columns", [7, _stack.BLOCK_COLUMNS])
def test_delta_view_matches_materialised_updates(monkeypatch, block_columns):
    monkeypatch.setattr(_stack, "BLOCK_COLUMNS", block_columns)
    rng = np.random.default_rng(2)
    global_params = {key: rng.standard_normal(shape).astype(np.float32) for key, shape in SHAPES.items()}
    clients = {cid: {k: global_params[k] + v for k, v in u.items()} for cid, u in random_updates(7).items()}
    clients["c3"]["extra.buffer"] = np.zeros(2)  # keys the global model lacks are ignored
    view = client_updates(global_params, clients)
    assert isinstance(view, ClientDeltas) and list(view) == list(clients) and len(view) == 7
    assert list(view["c3"]) == list(global_params)
    materialised = {cid: view[cid] for cid in view}
    counts = {cid: 3.0 + i for i, cid in enumerate(clients)}
    for name, params in RULES.items():
        streamed = make_aggregator(name, **params)(view, counts)
        direct = make_aggregator(name, **params)(materialised, counts)
        assert streamed.kept == direct.kept
        for key in global_params:
            assert streamed.update[key].dtype == np.float32
            np.testing.assert_allclose(streamed.update[key], direct.update[key], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="client 'c1': key 'wte.weight' missing"):
        client_updates(global_params, {"c1": {k: v for k, v in clients["c1"].items() if k != "wte.weight"}})
    bad = {**clients, "c9": {**clients["c1"], "wte.weight": np.full((5, 4), np.inf, np.float32)}}
    with pytest.raises(ValueError, match="client 'c9': key 'wte.weight' has non-finite values"):
        fedavg(client_updates(global_params, bad), {cid: 1 for cid in bad})


def test_streaming_over_several_blocks(monkeypatch):
    # keys larger than one block must give the same answers as one-shot numpy
    monkeypatch.setattr(_stack, "BLOCK_COLUMNS", 7)
    updates = random_updates(6, seed=3)
    stacked = np.stack([flat(u) for u in updates.values()]).astype(np.float64)
    np.testing.assert_allclose(flat(coordinate_median(updates)), np.median(stacked, axis=0), rtol=1e-6)
    counts = {cid: float(i + 1) for i, cid in enumerate(updates)}
    weights = np.arange(1, 7) / 21
    np.testing.assert_allclose(flat(fedavg(updates, counts)), weights @ stacked, rtol=1e-6)
    scores = make_aggregator("multi_krum", f=1, m=3)(updates, counts).details["scores"]
    brute = brute_force_krum_scores(stacked, f=1)
    np.testing.assert_allclose(list(scores.values()), brute, rtol=1e-9)


# ----------------------------------------------------------------------------- independent implementations


def flower_results(updates, counts):
    """Flower's input format: list of (list of arrays, num_examples)."""
    return [([np.asarray(a) for a in u.values()], int(counts[cid])) for cid, u in updates.items()]


def brute_force_krum_scores(stacked, f):
    n = len(stacked)
    scores = []
    for i in range(n):
        distances = sorted(float(np.sum((stacked[i] - stacked[j]) ** 2)) for j in range(n) if j != i)
        scores.append(sum(distances[: max(n - f - 2, 1)]))
    return scores


def test_fedavg_matches_flower_aggregate():
    pytest.importorskip("flwr", reason="the Flower oracle needs the flower extra")
    from flwr.server.strategy.aggregate import aggregate

    updates = random_updates(7, seed=1)
    counts = {cid: 10 + 3 * i for i, cid in enumerate(updates)}
    ours = fedavg(updates, counts)
    for mine, theirs in zip(ours.values(), aggregate(flower_results(updates, counts))):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("n_clients", [5, 20])
def test_median_matches_flower(n_clients):
    pytest.importorskip("flwr", reason="the Flower oracle needs the flower extra")
    from flwr.server.strategy.aggregate import aggregate_median

    updates = random_updates(n_clients, seed=n_clients)
    ours = coordinate_median(updates, ones(updates))
    for mine, theirs in zip(ours.values(), aggregate_median(flower_results(updates, ones(updates)))):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.2, 0.3, 0.4])
def test_trimmed_mean_matches_flower_and_scipy(fraction):
    pytest.importorskip("flwr", reason="the Flower oracle needs the flower extra")
    from flwr.server.strategy.aggregate import aggregate_trimmed_avg
    from flwr.serverapp.strategy.fedtrimmedavg import trim_mean as flower_trim_mean
    from scipy.stats import trim_mean

    updates = random_updates(20, seed=int(fraction * 10))
    ours = trimmed_mean(updates, trim_fraction=fraction)
    legacy = aggregate_trimmed_avg(flower_results(updates, ones(updates)), fraction)
    for key, theirs in zip(ours, legacy):
        stacked = np.stack([u[key] for u in updates.values()])
        np.testing.assert_allclose(ours[key], theirs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours[key], flower_trim_mean(stacked, fraction), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours[key], trim_mean(stacked.astype(np.float64), fraction, axis=0),
                                   rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fraction", [0.1, 0.4])
def test_multi_krum_matches_flower(fraction):
    pytest.importorskip("flwr", reason="the Flower oracle needs the flower extra")
    from flwr.app import ArrayRecord, RecordDict
    from flwr.server.strategy.aggregate import aggregate_krum
    from flwr.serverapp.strategy.multikrum import select_multikrum

    updates, _ = two_groups(12, 8, seed=4)
    for i, cid in enumerate(updates):  # spread the scores so that no two tie
        updates[cid]["w"] = updates[cid]["w"] * (1 + 0.01 * i)
    counts = {cid: 5 + i for i, cid in enumerate(updates)}
    params = paper_parameters(fraction)["multi_krum"]
    result = make_aggregator("multi_krum", weighted=True, **params)(updates, counts)
    # Flower's legacy helper: selection then sample-weighted average
    legacy = aggregate_krum(flower_results(updates, counts), num_malicious=params["f"], to_keep=params["m"])
    np.testing.assert_allclose(result.update["w"], legacy[0], rtol=1e-9)
    # Flower's current strategy helper: the selected set
    contents = [RecordDict({"arrays": ArrayRecord(numpy_ndarrays=[u["w"]])}) for u in updates.values()]
    chosen = select_multikrum(contents, params["f"], params["m"])
    ids = list(updates)
    assert sorted(ids[[c is x for x in contents].index(True)] for c in chosen) == sorted(result.kept)
    if fraction == 0.4:
        assert set(result.kept) == {f"b{i}" for i in range(12)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_flame_clustering_matches_sklearn_hdbscan(seed):
    from sklearn.cluster import HDBSCAN
    from sklearn.metrics.pairwise import cosine_distances

    if seed == 0:
        updates, _ = two_groups(12, 8, seed=seed)
    else:  # unstructured updates: whatever HDBSCAN finds, we must find the same
        updates = random_updates(9 + seed, seed=seed)
    stacked = np.stack([flat(u) for u in updates.values()]).astype(np.float64)
    n = len(stacked)
    labels = HDBSCAN(min_cluster_size=n // 2 + 1, min_samples=1, metric="precomputed",
                     allow_single_cluster=True, copy=True).fit(cosine_distances(stacked)).labels_
    if (labels < 0).all():
        expected = set(updates)
    else:
        biggest = np.bincount(labels[labels >= 0]).argmax()
        expected = {cid for cid, label in zip(updates, labels) if label == biggest}
    result = make_aggregator("flame", random_state=0)(updates, ones(updates))
    assert set(result.kept) == expected
    if seed == 0:
        assert len(expected) >= 10 and all(cid.startswith("b") for cid in expected)
    norms = np.linalg.norm(stacked, axis=1)
    assert result.details["median_norm"] == pytest.approx(float(np.median(norms)), rel=1e-12)


def test_composes_with_fedlns_screening():
    fedlns_core = pytest.importorskip("fedlns_core")
    if not hasattr(fedlns_core, "FedLNS"):
        pytest.skip("fedlns_core.FedLNS not available yet")
    rng = np.random.default_rng(0)
    global_params = {"h.0.ln_1.weight": np.ones(4, np.float32), "h.0.ln_1.bias": np.zeros(4, np.float32),
                     "h.0.mlp.c_fc.weight": np.zeros((4, 6), np.float32)}
    clients = {i: {k: v + 0.01 * rng.standard_normal(v.shape).astype(np.float32) for k, v in global_params.items()}
               for i in range(6)}
    counts = {i: 10 for i in clients}
    result = fedlns_core.FedLNS.paper(activation_threshold=0, random_state=0).screen(global_params, clients, counts)
    new = result.aggregate(global_params, clients, aggregator=make_aggregator("coordinate_median"))
    retained = {i: client_updates(global_params, {i: clients[i]})[i] for i in result.retained}
    expected = apply_update(global_params, coordinate_median(retained))
    for key in global_params:
        np.testing.assert_allclose(new[key], expected[key], rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- properties

RULES = {
    "fedavg": {}, "norm_bounded_fedavg": {}, "coordinate_median": {},
    "trimmed_mean": {"trim_fraction": 0.2}, "multi_krum": {"f": 1, "m": 3}, "flame": {"noise_scale": 0.0},
}
values = st.floats(-100, 100, allow_nan=False, width=32)


@st.composite
def small_rounds(draw):
    n_clients = draw(st.integers(1, 7))
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    updates = {}
    for i in range(n_clients):
        updates[f"c{i}"] = {f"k{j}": np.array(draw(st.lists(values, min_size=s, max_size=s)), np.float64)
                            for j, s in enumerate(sizes)}
    counts = {cid: float(draw(st.integers(1, 50))) for cid in updates}
    return updates, counts


@settings(max_examples=40, deadline=None)
@given(small_rounds(), st.randoms(use_true_random=False))
def test_client_order_does_not_matter(round_, random):
    updates, counts = round_
    order = list(updates)
    random.shuffle(order)
    shuffled = {cid: updates[cid] for cid in order}
    for name, params in RULES.items():
        if name in ("multi_krum", "flame"):
            continue  # tie-breaking by input order is documented; checked below without ties
        first = make_aggregator(name, **params)(updates, counts)
        second = make_aggregator(name, **params)(shuffled, counts)
        for key in first:
            np.testing.assert_allclose(first[key], second[key], rtol=1e-9, atol=1e-9)


@settings(max_examples=20, deadline=None)
@given(st.integers(5, 9), st.integers(0, 2**31 - 1), st.randoms(use_true_random=False))
def test_client_order_does_not_matter_for_selecting_rules(n_clients, seed, random):
    # continuous values and n - f - 2 >= 2 nearest neighbours: no tied Krum scores
    # (with one neighbour, mutual nearest neighbours always tie)
    updates = random_updates(n_clients, seed=seed, dtype=np.float64)
    order = list(updates)
    random.shuffle(order)
    shuffled = {cid: updates[cid] for cid in order}
    for name in ("multi_krum", "flame"):
        first = make_aggregator(name, **RULES[name])(updates, ones(updates))
        second = make_aggregator(name, **RULES[name])(shuffled, ones(updates))
        assert set(first.kept) == set(second.kept)
        for key in first.update:
            np.testing.assert_allclose(first.update[key], second.update[key], rtol=1e-9, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(values, min_size=1, max_size=5), st.integers(1, 8))
@example([1.0, -2.5], 1)
def test_identical_updates_give_that_update(vector, n_clients):
    update = np.array(vector, np.float64)
    updates = {i: {"w": update.copy()} for i in range(n_clients)}
    counts = {i: float(i + 1) for i in range(n_clients)}
    for name, params in RULES.items():
        out = make_aggregator(name, **params)(updates, counts)
        np.testing.assert_allclose(out["w"], update, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(small_rounds(), st.floats(0.0, 0.49))
def test_median_and_trimmed_mean_lie_within_the_coordinate_range(round_, fraction):
    updates, counts = round_
    for out in (coordinate_median(updates, counts), trimmed_mean(updates, counts, trim_fraction=fraction)):
        for key in out:
            stacked = np.stack([u[key] for u in updates.values()])
            assert np.all(out[key] >= stacked.min(axis=0) - 1e-12)
            assert np.all(out[key] <= stacked.max(axis=0) + 1e-12)


@settings(max_examples=30, deadline=None)
@given(small_rounds(), st.floats(0.01, 10.0))
def test_norm_bounded_output_norm_is_within_the_bound(round_, bound):
    updates, counts = round_
    out = norm_bounded_fedavg(updates, counts, bound=bound)
    assert np.linalg.norm(flat(out)) <= bound * (1 + 1e-9)
