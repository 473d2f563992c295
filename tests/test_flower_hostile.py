"""Hostile replies against FedLNSStrategy: each known hostile reply as a named reproducer, and a property over one."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

flwr = pytest.importorskip("flwr")

from flwr.app import ArrayRecord, Error, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from fedlns_flower import FedLNSStrategy, arrayrecord_to_numpy, numpy_to_arrayrecord  # noqa: E402
from test_flower_strategy import (  # noqa: E402
    ATTACKERS, BENIGN, RecordingFedAvg, client_arrays, configure, global_arrays, make_screener, reply, task_identity,
)

HOSTILE = 999
__all__ = ["task_identity"]      # the autouse fixture, re-exported so pytest applies it here too


def run_round(replies, nodes, **screener_settings):
    inner = RecordingFedAvg()
    strategy = FedLNSStrategy(strategy=inner, screener=make_screener(**screener_settings))
    sent, _ = configure(strategy, nodes=nodes)
    arrays, metrics = strategy.aggregate_train(1, replies)
    return strategy, inner, sent, arrays, metrics


def decided(strategy):
    result = strategy.results[-1]["screening"]
    return (set(result.retained) - {HOSTILE}, {n: r for n, r in result.rejected.items() if n != HOSTILE})


def test_reproducer_extra_metric_key_attackers_cannot_get_honest_replies_dropped():
    honest = list(range(101, 108))
    attackers = list(range(201, 212))
    replies = [reply(node) for node in honest]
    for node in attackers:      # 11 attackers, a majority: ordinary arrays, one extra metric key
        replies.append(reply(node, metrics={"num-examples": 12, "train-loss": 1.0, "extra": 1.0}))
    strategy, inner, _, arrays, metrics = run_round(replies, honest + attackers, activation_threshold=0)
    assert strategy.results[-1]["dropped"] == {}
    result = strategy.results[-1]["screening"]
    assert set(honest) <= set(result.retained)             # screened like anyone else, none dropped
    assert set(honest) <= set(inner.received[-1]) and "extra" not in metrics


def test_extra_metric_keys_of_retained_replies_are_ignored_not_fatal():
    nodes = BENIGN + ATTACKERS
    replies = [reply(node, metrics={"num-examples": 10, "train-loss": 1.0, **({"x": 1.0} if node % 2 else {})})
               for node in nodes]
    strategy, inner, _, _, metrics = run_round(replies, nodes)
    assert set(inner.received[-1]) == set(BENIGN)
    assert "train-loss" in metrics and "x" not in metrics


def test_reproducer_unsampled_node_is_dropped():
    nodes = BENIGN + ATTACKERS
    replies = [reply(node) for node in nodes] + [reply(HOSTILE)]
    strategy, _, _, _, _ = run_round(replies, nodes)
    assert "not sent a train message" in strategy.results[-1]["dropped"][HOSTILE]
    assert HOSTILE not in strategy.screener.bank


def test_reproducer_float64_reply_does_not_change_the_global_dtype():
    nodes = BENIGN + ATTACKERS
    first = {k: v.astype(np.float64) for k, v in client_arrays(BENIGN[0]).items()}
    replies = [reply(BENIGN[0], first)] + [reply(node) for node in nodes[1:]]
    strategy, _, _, arrays, _ = run_round(replies, nodes)
    assert "dtype float64" in strategy.results[-1]["dropped"][BENIGN[0]]
    assert all(value.dtype == np.float32 for value in arrayrecord_to_numpy(arrays).values())


def test_reproducer_huge_norms_keep_the_serverapp_running_and_the_screen_on():
    nodes = BENIGN + ATTACKERS + [HOSTILE]
    huge = {k: (np.full_like(v, 1e38) if "ln" in k else v) for k, v in client_arrays(HOSTILE).items()}
    replies = [reply(node) for node in BENIGN + ATTACKERS] + [reply(HOSTILE, huge)]
    strategy, inner, _, arrays, _ = run_round(replies, nodes)
    result = strategy.results[-1]["screening"]
    assert result.rejected[HOSTILE].startswith("invalid:")
    assert set(result.rejected) == set(ATTACKERS) | {HOSTILE}
    assert all(np.isfinite(value).all() for value in arrayrecord_to_numpy(arrays).values())


def test_reproducer_two_1e308_counts_do_not_zero_the_model():
    nodes = BENIGN + ATTACKERS
    replies = [reply(node, metrics={"num-examples": 1e308 if node in BENIGN[:2] else 10, "train-loss": 1.0})
               for node in nodes]
    strategy, inner, _, arrays, _ = run_round(replies, nodes)
    assert all("exceeds" in strategy.results[-1]["screening"].rejected[node] for node in BENIGN[:2])
    aggregated = arrayrecord_to_numpy(arrays)
    assert np.abs(aggregated["h.0.ln_1.weight"] - 1).max() < 0.1          # not all zero


def test_a_huge_count_within_2_53_is_capped_for_the_inner_strategy():
    nodes = BENIGN + ATTACKERS
    replies = [reply(node, metrics={"num-examples": 10**12 if node == BENIGN[0] else 10, "train-loss": 1.0})
               for node in nodes]
    strategy, inner, _, arrays, _ = run_round(replies, nodes)
    result = strategy.results[-1]["screening"]
    assert result.capped_counts == {BENIGN[0]: 10**12} and result.num_examples[BENIGN[0]] == 100.0
    expected = sum(result.weights[n] * client_arrays(n)["h.0.ln_1.bias"].astype(float) for n in BENIGN)
    np.testing.assert_allclose(arrayrecord_to_numpy(arrays)["h.0.ln_1.bias"], expected, atol=1e-6)


def test_reproducer_error_text_cannot_forge_log_lines(caplog, tmp_path):
    nodes = BENIGN + ATTACKERS + [HOSTILE]
    replies = [reply(node) for node in BENIGN + ATTACKERS]
    replies.append(reply(HOSTILE, error=Error(code=1, reason="boom\nINFO :      forged line")))
    inner = RecordingFedAvg()
    strategy = FedLNSStrategy(strategy=inner, screener=make_screener(), log_path=tmp_path / "log.jsonl")
    configure(strategy, nodes=nodes)
    with caplog.at_level(logging.INFO, logger="flwr"):
        strategy.aggregate_train(1, replies)
    assert not any(line.lstrip().startswith("INFO :      forged") for line in caplog.text.splitlines())
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 1


def test_a_failing_inner_strategy_keeps_the_arrays():
    class Broken(FedAvg):
        def aggregate_train(self, server_round, replies):
            raise RuntimeError("inner strategy failed")
    strategy = FedLNSStrategy(strategy=Broken(), screener=make_screener())
    sent, _ = configure(strategy)
    arrays, metrics = strategy.aggregate_train(1, [reply(node) for node in BENIGN + ATTACKERS])
    assert arrays is sent and metrics["fedlns-failed"] == 1


def test_arguments_are_checked_when_built(tmp_path):
    with pytest.raises(TypeError, match="Strategy"):
        FedLNSStrategy(strategy=object(), screener=make_screener())
    with pytest.raises(TypeError, match="FedLNS"):
        FedLNSStrategy(strategy=FedAvg(), screener=None)
    with pytest.raises(ValueError, match="warmup"):
        FedLNSStrategy(strategy=FedAvg(), screener=make_screener(warmup="never"))
    with pytest.raises(ValueError, match="directory"):
        FedLNSStrategy(strategy=FedAvg(), screener=make_screener(), log_path=tmp_path)


# ------------------------------------------------------------------------------------ the property

class Unreadable:
    """Stands for a reply whose content raises on access."""


def _hostile_reply():
    keys = sorted(global_arrays())

    def arrays_with(key, value):
        arrays = client_arrays(HOSTILE)
        arrays[key] = value
        return arrays

    magnitude = st.sampled_from([1e10, 1e30, 3e38])
    huge = st.tuples(st.sampled_from(keys), magnitude).map(
        lambda spec: reply(HOSTILE, arrays_with(spec[0], np.full_like(global_arrays()[spec[0]], spec[1]))))
    non_finite = st.tuples(st.sampled_from(keys), st.sampled_from([np.nan, np.inf])).map(
        lambda spec: reply(HOSTILE, arrays_with(spec[0], np.full_like(global_arrays()[spec[0]], spec[1]))))
    dtype = st.tuples(st.sampled_from(keys), st.sampled_from([np.float64, np.float16, np.int32, np.complex64])).map(
        lambda spec: reply(HOSTILE, arrays_with(spec[0], global_arrays()[spec[0]].astype(spec[1]))))
    shape = st.sampled_from(keys).map(lambda key: reply(HOSTILE, arrays_with(key, np.zeros(5, np.float32))))
    counts = st.sampled_from([0, -1, float("nan"), float("inf"), 5e-324, 1e300, 1.7e308, [1, 2], "7"]).map(
        lambda count: reply(HOSTILE, metrics={"num-examples": count, "train-loss": 1.0}))
    layouts = st.sampled_from([
        RecordDict({"a": numpy_to_arrayrecord(client_arrays(HOSTILE)), "b": ArrayRecord(),
                    "metrics": MetricRecord({"num-examples": 10})}),
        RecordDict({"arrays": numpy_to_arrayrecord(client_arrays(HOSTILE))}),
        RecordDict({"arrays": numpy_to_arrayrecord({**client_arrays(HOSTILE), "extra.weight": np.zeros(2, np.float32)}),
                    "metrics": MetricRecord({"num-examples": 10})}),
        RecordDict({"arrays": numpy_to_arrayrecord(client_arrays(HOSTILE)),
                    "metrics": MetricRecord({"num-examples": 10, "train-loss": [1.0, 2.0], "zzz": 1})}),
        RecordDict({"weights": numpy_to_arrayrecord(client_arrays(HOSTILE)),
                    "m": MetricRecord({"num-examples": 10, "train-loss": 1.0})}),
    ]).map(lambda content: reply(HOSTILE, content=content))
    unsampled = st.just("unsampled")
    error = st.just(reply(HOSTILE, error=Error(code=2, reason="x\ny")))
    return st.one_of(huge, non_finite, dtype, shape, counts, layouts, unsampled, error)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_hostile_reply())
def test_one_hostile_reply_never_changes_the_others_decisions(hostile):
    nodes = BENIGN + ATTACKERS
    honest_replies = [reply(node) for node in nodes]
    reference, reference_inner, _, reference_arrays, _ = run_round(honest_replies, nodes)
    sampled = nodes if hostile == "unsampled" else nodes + [HOSTILE]
    extra = reply(HOSTILE) if hostile == "unsampled" else hostile
    strategy, inner, _, arrays, _ = run_round(honest_replies + [extra], sampled)
    result = strategy.results[-1]["screening"]
    dropped = strategy.results[-1]["dropped"]
    if HOSTILE in dropped:
        assert dropped[HOSTILE].startswith("dropped: ") and HOSTILE not in strategy.screener.bank
        assert decided(strategy) == decided(reference)
    elif HOSTILE in result.rejected and result.rejected[HOSTILE].startswith("invalid: "):
        assert HOSTILE not in strategy.screener.bank
        assert decided(strategy) == decided(reference)
    else:                           # a layout the adapter tolerates: the reply was screened like any other
        assert HOSTILE in result.labels
        retained, rejected = decided(strategy)
        assert retained == decided(reference)[0] and set(rejected) == set(decided(reference)[1])
    assert set(inner.received[-1]) - {HOSTILE} == set(reference_inner.received[-1])
    aggregated = arrayrecord_to_numpy(arrays)
    assert all(value.dtype == np.float32 and np.isfinite(value).all() for value in aggregated.values())
    if HOSTILE not in result.retained:
        expected = arrayrecord_to_numpy(reference_arrays)
        for key in expected:
            np.testing.assert_allclose(aggregated[key], expected[key], rtol=1e-6)
