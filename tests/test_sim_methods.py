"""The server step of the simulator's methods: FedAvg and the oracle through fedlns_core, and FedLNS in front of a
full-update rule (defence in depth)."""

import numpy as np
import pytest

pytest.importorskip("torch")
from fedlns_sim.baselines import client_updates, coordinate_median, multi_krum  # noqa: E402
from fedlns_sim.config import COMPOSED, make_config  # noqa: E402
from fedlns_sim.methods import aggregate_round, make_screener  # noqa: E402


def _round(seed=0):
    rng = np.random.default_rng(seed)
    global_params = {"h.0.ln_1.weight": np.ones(16), "h.0.mlp.weight": np.zeros((4, 4))}
    clients = {c: {"h.0.ln_1.weight": 1 + (0.5 if c < 3 else 0.0) + 0.01 * rng.standard_normal(16),
                   "h.0.mlp.weight": 0.1 * rng.standard_normal((4, 4))} for c in range(10)}
    return global_params, clients, {c: 8.0 for c in clients}


@pytest.mark.parametrize("method", sorted(COMPOSED))
def test_composition_applies_the_rule_to_exactly_what_fedlns_retained(method):
    config = make_config("smoke", "gpt", method=method, num_clients=10, activation_coverage=0.5)
    global_params, clients, counts = _round()
    outcome = aggregate_round(config, make_screener(config), global_params, clients, counts, 1)
    assert outcome.decided and sorted(outcome.kept) == list(range(3, 10))     # the three shifted ones screened out
    retained = {c: clients[c] for c in outcome.kept}
    updates = client_updates(global_params, retained)
    if method == "fedlns_median":
        expected = coordinate_median(updates)
    elif method == "fedlns_multi_krum":     # f = round(0.4 x 7) = 3, m = 4 on the 7 retained clients
        expected = multi_krum(updates, {c: 8.0 for c in retained}, f=3, m=4)
    else:
        expected = None
    if expected is not None:
        for key in global_params:
            assert np.allclose(outcome.params[key] - global_params[key], expected[key])
    plain = aggregate_round(make_config("smoke", "gpt", method="fedlns", num_clients=10, activation_coverage=0.5),
                            make_screener(config), global_params, clients, counts, 1)
    assert plain.kept == outcome.kept


def test_oracle_and_fedavg_average_with_the_core():
    from fedlns_core import weighted_average

    global_params, clients, counts = _round()
    counts = {c: float(c + 1) for c in clients}
    fedavg = aggregate_round(make_config("smoke", "gpt", method="fedavg"), None, global_params, clients, counts, 1)
    expected = weighted_average(global_params, clients, counts)
    assert all(np.array_equal(fedavg.params[k], expected[k]) for k in global_params)
    oracle = aggregate_round(make_config("smoke", "gpt", method="oracle"), None, global_params, clients, counts, 1,
                             malicious=frozenset({0, 1, 2}))
    benign = {c: clients[c] for c in range(3, 10)}
    expected = weighted_average(global_params, benign, {c: counts[c] for c in benign})
    assert oracle.kept == list(range(3, 10)) and all(np.array_equal(oracle.params[k], expected[k]) for k in expected)
    everyone_bad = aggregate_round(make_config("smoke", "gpt", method="oracle"), None, global_params, clients, counts,
                                   1, malicious=frozenset(clients))
    assert everyone_bad.kept == [] and all(np.array_equal(everyone_bad.params[k], global_params[k])
                                           for k in global_params)


def test_screener_settings_come_from_the_config():
    paper = make_screener(make_config("cpu", "gpt", method="fedlns"))
    assert (paper.retain_rule, paper.mixture_solver, paper.activation_threshold) == ("paper", "sklearn", 50)
    config = make_config("cpu", "gpt", method="fedlns", retain_rule="for_federation", mixture_solver="fast")
    planned = make_screener(config)
    from fedlns_core import FedLNS, rule_for_round_size
    expected = FedLNS.paper(**rule_for_round_size(config.clients_per_round))
    assert (planned.retain_rule, planned.min_separation, planned.lone_separation, planned.clip) == (
        expected.retain_rule, expected.min_separation, expected.lone_separation, None)
    assert planned.activation_threshold == config.activation_threshold and planned.mixture_solver == "fast"
    default = make_screener(make_config("cpu", "gpt", method="fedlns_default", warmup="hold"))
    planned = FedLNS.for_federation(100, 10, signature="norm")      # the population size, nothing else; the
    assert default.get_params() == {**planned.get_params(), "random_state": default.random_state}   # norms as set
    automatic = make_screener(make_config("cpu", "gpt", method="fedlns_default", signature="auto"))
    assert automatic.get_params() == {**FedLNS.for_federation(100, 10).get_params(),
                                      "random_state": automatic.random_state}       # exactly FedLNS()
    assert make_screener(make_config("cpu", "gpt", method="fedavg")) is None
    assert make_screener(make_config("cpu", "gpt", method="fedlns_default", quorum=0.5)).quorum == 0.5
    with pytest.raises(ValueError, match="apply to method fedlns_default only"):
        make_config("cpu", "gpt", method="fedlns", quorum=0.5)
    with pytest.raises(ValueError, match="quorum must be in"):
        make_config("cpu", "gpt", method="fedlns_default", quorum=2.0)


@pytest.mark.parametrize("warmup", ["hold", "aggregate"])
def test_warmup_before_activation_holds_the_global_model_or_averages_everyone(warmup):
    from fedlns_core import weighted_average

    config = make_config("smoke", "gpt", method="fedlns", num_clients=10, activation_coverage=1.0, warmup=warmup)
    global_params, clients, counts = _round()
    screener = make_screener(config)
    assert screener.warmup == warmup
    first = {c: clients[c] for c in range(5)}            # 5 of the 10 ids: the bank is not full, no screening yet
    outcome = aggregate_round(config, screener, global_params, first, {c: counts[c] for c in first}, 1)
    assert not outcome.decided
    expected = global_params if warmup == "hold" else weighted_average(global_params, first, {c: 8.0 for c in first})
    assert all(np.allclose(outcome.params[k], expected[k]) for k in global_params)
    assert outcome.kept == ([] if warmup == "hold" else list(first))
