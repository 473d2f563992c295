"""FedLNSStrategy on hand-built Flower Messages (flwr >= 1.41 Message API)."""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flwr.app import (  # noqa: E402
    ConfigRecord,
    Error,
    Message,
    MessageType,
    Metadata,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import (  # noqa: E402
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    FedMedian,
)
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedlns_core import FedLNS, NormSelector  # noqa: E402
from fedlns_flower import FedLNSStrategy, arrayrecord_to_numpy, numpy_to_arrayrecord  # noqa: E402

NORM_KEYS = ("h.0.ln_1.weight", "h.0.ln_1.bias", "h.1.ln_1.weight", "h.1.ln_1.bias")
BENIGN = [101, 102, 103, 104, 105, 106, 107]
ATTACKERS = [201, 202, 203]


def global_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {key: np.ones(6, np.float32) if key.endswith("weight") else np.zeros(6, np.float32) for key in NORM_KEYS}
    arrays["h.0.mlp.weight"] = rng.normal(size=(6, 6)).astype(np.float32)
    return arrays


def client_arrays(node: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Benign clients move every parameter a little; attackers move norm parameters a lot."""
    rng = np.random.default_rng([node, seed])
    arrays = {}
    for key, value in global_arrays().items():
        step = rng.normal(scale=0.01, size=value.shape)
        if node in ATTACKERS and key in NORM_KEYS:
            step += 0.5
        arrays[key] = (value + step).astype(np.float32)
    return arrays


def reply(node: int, arrays=None, *, metrics=None, content=None, error=None, seed=0) -> Message:
    """A training reply as the SuperLink delivers it: the sender is in the metadata."""
    metadata = Metadata(
        run_id=1, message_id=f"m{node}", src_node_id=node, dst_node_id=1, reply_to_message_id=f"i{node}",
        group_id="1", created_at=time.time(), ttl=3600.0, message_type=MessageType.TRAIN,
    )
    if error is not None:
        return Message(error=error, metadata=metadata)
    if content is None:
        arrays = client_arrays(node, seed) if arrays is None else arrays
        metrics = {"num-examples": 10 + node % 7, "train-loss": 1.0} if metrics is None else metrics
        content = RecordDict({"arrays": numpy_to_arrayrecord(arrays), "metrics": MetricRecord(metrics)})
    return Message(content=content, metadata=metadata)


class FakeGrid(Grid):
    """Just enough of a Grid for configure_* (node sampling); nothing is sent."""

    def __init__(self, node_ids):
        self.node_ids = list(node_ids)

    def set_run(self, run_id):
        pass

    @property
    def run(self):
        raise NotImplementedError

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        raise NotImplementedError

    def get_node_ids(self):
        return self.node_ids

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        raise NotImplementedError


@pytest.fixture(autouse=True)
def task_identity():
    """Flower stamps instruction messages with the running task's identity; give it one."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


class RecordingFedAvg(FedAvg):
    """FedAvg that remembers which replies reached its aggregate_train."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.received: list[list[int]] = []

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self.received.append([message.metadata.src_node_id for message in replies])
        return super().aggregate_train(server_round, replies)


def make_screener(**overrides) -> FedLNS:
    settings = dict(selector=NormSelector(keys=NORM_KEYS), activation_threshold=len(BENIGN + ATTACKERS), random_state=0)
    settings.update(overrides)
    return FedLNS.paper(**settings)


def configure(strategy, server_round=1, nodes=BENIGN + ATTACKERS):
    arrays = numpy_to_arrayrecord(global_arrays())
    messages = list(strategy.configure_train(server_round, arrays, ConfigRecord(), FakeGrid(nodes)))
    return arrays, messages


def test_attackers_are_rejected_and_only_retained_replies_reach_the_inner_strategy():
    inner = RecordingFedAvg(min_available_nodes=1, min_train_nodes=1)
    strategy = FedLNSStrategy(strategy=inner, screener=make_screener())
    configure(strategy)
    replies = [reply(node) for node in BENIGN + ATTACKERS]
    arrays, metrics = strategy.aggregate_train(1, replies)

    result = strategy.results[-1]["screening"]
    assert result.active
    assert set(result.retained) == set(BENIGN)
    assert set(result.rejected) == set(ATTACKERS)
    assert all(reason.startswith("screened:") for reason in result.rejected.values())
    assert sorted(inner.received[-1]) == sorted(BENIGN)

    # FedAvg's sample weighting applied to the survivors only.
    counts = np.array([10 + node % 7 for node in BENIGN], float)
    expected = {
        key: sum(c * client_arrays(node)[key].astype(float) for c, node in zip(counts, BENIGN)) / counts.sum()
        for key in global_arrays()
    }
    aggregated = arrayrecord_to_numpy(arrays)
    assert list(aggregated) == list(global_arrays())
    for key in expected:
        np.testing.assert_allclose(aggregated[key], expected[key], rtol=1e-5, atol=1e-6)
    assert metrics["fedlns-retained"] == len(BENIGN)
    assert metrics["fedlns-rejected"] == len(ATTACKERS)
    assert metrics["fedlns-active"] == 1 and metrics["fedlns-components"] == 2
    assert "train-loss" in metrics  # the inner strategy's metrics are kept


def test_identity_comes_from_the_metadata_not_from_the_content():
    strategy = FedLNSStrategy(strategy=FedAvg(), screener=make_screener())
    configure(strategy)
    # Every client claims to be node 101 in what it writes; only the metadata counts.
    replies = [
        reply(node, metrics={"num-examples": 10, "node-id": 101}) for node in BENIGN + ATTACKERS
    ]
    strategy.aggregate_train(1, replies)
    result = strategy.results[-1]["screening"]
    assert set(result.retained) | set(result.rejected) == set(BENIGN + ATTACKERS)
    assert set(strategy.screener.bank.ids) == set(BENIGN + ATTACKERS)


def test_names_come_from_the_arrayrecord_keys():
    strategy = FedLNSStrategy(strategy=FedAvg(), screener=make_screener(selector=None))
    configure(strategy)
    strategy.aggregate_train(1, [reply(node) for node in BENIGN + ATTACKERS])
    # With the default selector the core picks the norm parameters by their names.
    assert set(strategy.results[-1]["screening"].signature_keys) == set(NORM_KEYS)


def test_warm_up_holds_the_current_arrays():
    inner = RecordingFedAvg()
    strategy = FedLNSStrategy(strategy=inner, screener=make_screener(activation_threshold=50))
    sent, _ = configure(strategy)
    arrays, metrics = strategy.aggregate_train(1, [reply(node) for node in BENIGN + ATTACKERS])
    assert inner.received == []
    assert arrays is sent
    assert metrics["fedlns-active"] == 0 and metrics["fedlns-retained"] == 0
    assert metrics["fedlns-bank-size"] == len(BENIGN + ATTACKERS)
    assert metrics["fedlns-components"] == -1


def test_a_round_held_by_the_quorum_keeps_the_current_arrays():
    inner = RecordingFedAvg()
    screener = make_screener()
    screener.quorum = 1.0  # any rejection holds the round
    strategy = FedLNSStrategy(strategy=inner, screener=screener)
    sent, _ = configure(strategy)
    arrays, metrics = strategy.aggregate_train(1, [reply(node) for node in BENIGN + ATTACKERS])
    assert inner.received == [] and arrays is sent
    assert metrics["fedlns-active"] == 1 and metrics["fedlns-held"] == 1 and metrics["fedlns-retained"] == 0
    assert metrics["fedlns-rejected"] == len(BENIGN + ATTACKERS)
    result = strategy.results[-1]["screening"]
    assert all(result.rejected[node].startswith("held:") for node in BENIGN)


def test_other_inner_strategies_aggregate_the_survivors():
    strategy = FedLNSStrategy(strategy=FedMedian(), screener=make_screener())
    configure(strategy)
    arrays, _ = strategy.aggregate_train(1, [reply(node) for node in BENIGN + ATTACKERS])
    aggregated = arrayrecord_to_numpy(arrays)
    for key in global_arrays():
        expected = np.median(np.stack([client_arrays(node)[key] for node in BENIGN]), axis=0)
        np.testing.assert_allclose(aggregated[key], expected, rtol=1e-6)


def test_configure_evaluate_and_summary_pass_through(caplog):
    inner = FedAvg(weighted_by_key="tokens", min_available_nodes=2, min_train_nodes=2, min_evaluate_nodes=2)
    strategy = FedLNSStrategy(strategy=inner, screener=make_screener())
    assert strategy.weighted_by_key == "tokens"

    _, train_messages = configure(strategy, nodes=[5, 6, 7])
    assert sorted(m.metadata.dst_node_id for m in train_messages) == [5, 6, 7]
    assert all(m.metadata.message_type == MessageType.TRAIN for m in train_messages)
    evaluate_messages = list(
        strategy.configure_evaluate(1, numpy_to_arrayrecord(global_arrays()), ConfigRecord(), FakeGrid([5, 6]))
    )
    assert sorted(m.metadata.dst_node_id for m in evaluate_messages) == [5, 6]
    assert all(m.metadata.message_type == MessageType.EVALUATE for m in evaluate_messages)

    evaluate_replies = [
        reply(node, content=RecordDict({"metrics": MetricRecord({"tokens": tokens, "loss": loss})}))
        for node, tokens, loss in [(5, 1, 2.0), (6, 3, 4.0)]
    ]
    aggregated = strategy.aggregate_evaluate(1, evaluate_replies)
    assert aggregated["loss"] == pytest.approx((1 * 2.0 + 3 * 4.0) / 4)

    with caplog.at_level(logging.INFO, logger="flwr"):
        strategy.summary()
    assert "FedLNS screening of FedAvg" in caplog.text
    assert "Weighted by: 'tokens'" in caplog.text  # the inner summary ran too


@pytest.mark.parametrize("threshold", [100, len(BENIGN + ATTACKERS)])
def test_a_federation_too_small_to_activate_the_screener_is_warned_about_once(caplog, threshold):
    """FedLNS()'s activation_threshold is 100: a user with ten nodes is never screened, and is told so at the first
    round (once); every warm-up round says its replies were aggregated unscreened, not that they were retained."""
    inner = FedAvg(min_available_nodes=1, min_train_nodes=1)
    screener = FedLNS(selector=NormSelector(keys=NORM_KEYS), activation_threshold=threshold, random_state=0)
    strategy = FedLNSStrategy(strategy=inner, screener=screener)
    with caplog.at_level(logging.INFO, logger="flwr"):
        for server_round in (1, 2):
            configure(strategy, server_round)
            strategy.aggregate_train(server_round, [reply(node) for node in BENIGN + ATTACKERS])
    warnings = caplog.text.count("FedLNS will not screen yet: activation_threshold=100, but the grid's nodes and the bank "
                               "know 10 clients")
    assert warnings == (1 if threshold == 100 else 0)
    if threshold == 100:
        assert caplog.text.count("warming up (bank 10 of activation_threshold=100): 10 of 10 replies aggregated") == 2
        assert "FedLNS.for_federation(num_clients, clients_per_round)" in caplog.text
    else:
        assert "warming up" not in caplog.text and "retained" in caplog.text


def test_count_is_read_from_the_inner_weighted_by_key():
    strategy = FedLNSStrategy(strategy=FedAvg(weighted_by_key="tokens"), screener=make_screener(activation_threshold=50))
    configure(strategy)
    strategy.aggregate_train(1, [reply(node, metrics={"tokens": 40}) for node in BENIGN[:3]])
    assert strategy.results[-1]["screening"].rejected == {}
    strategy.aggregate_train(1, [reply(node, metrics={"num-examples": 40}) for node in BENIGN[:1]])
    assert "'tokens'" in strategy.results[-1]["dropped"][BENIGN[0]]


def test_state_is_saved_every_round_and_resumed_by_a_new_wrapper(tmp_path):
    state_path = tmp_path / "state" / "fedlns.npz"
    log_path = tmp_path / "screening.jsonl"
    first = FedLNSStrategy(
        strategy=FedAvg(), screener=make_screener(activation_threshold=10), state_path=state_path, log_path=log_path
    )
    configure(first, server_round=1)
    # Round 1: only the benign half has been seen, below the threshold: hold.
    first.aggregate_train(1, [reply(node) for node in BENIGN])
    assert state_path.exists()
    assert first.results[-1]["screening"].active is False

    # A restarted ServerApp: new wrapper, new (empty) screener, same paths.
    inner = RecordingFedAvg()
    second = FedLNSStrategy(
        strategy=inner, screener=make_screener(activation_threshold=10), state_path=state_path, log_path=log_path
    )
    configure(second, server_round=1)
    assert second.screener.round_ == 1
    assert set(second.screener.bank.ids) == set(BENIGN)
    # The attackers now complete the bank (7 + 3 >= 10) and are screened out at once.
    second.aggregate_train(1, [reply(node, seed=1) for node in BENIGN[:4] + ATTACKERS])
    result = second.results[-1]["screening"]
    assert result.active and result.round == 1 and result.bank_size == 10
    assert set(result.rejected) == set(ATTACKERS)
    assert sorted(inner.received[-1]) == sorted(BENIGN[:4])

    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [line["screening"]["active"] for line in lines] == [False, True]
    assert sorted(node for node, _ in lines[1]["screening"]["rejected"]) == sorted(ATTACKERS)
    assert FedLNS.load(state_path).round_ == 2


def test_bad_replies_are_dropped_or_rejected_with_reasons_and_the_round_goes_on(caplog):
    inner = RecordingFedAvg()
    strategy = FedLNSStrategy(strategy=inner, screener=make_screener(activation_threshold=len(BENIGN) - 1))
    configure(strategy, nodes=BENIGN + ATTACKERS + list(range(301, 310)))
    good = [reply(node) for node in BENIGN + ATTACKERS]

    nan_arrays = client_arrays(301)
    nan_arrays["h.0.ln_1.weight"][2] = np.nan
    short_arrays = client_arrays(302)
    short_arrays["h.1.ln_1.bias"] = np.zeros(5, np.float32)
    missing_arrays = client_arrays(303)
    del missing_arrays["h.0.mlp.weight"]
    two_records = RecordDict(
        {
            "a": numpy_to_arrayrecord(client_arrays(305)),
            "b": numpy_to_arrayrecord(client_arrays(305)),
            "metrics": MetricRecord({"num-examples": 3, "train-loss": 1.0}),
        }
    )
    bad = [
        reply(301, nan_arrays),
        reply(302, short_arrays),
        reply(303, missing_arrays),
        reply(304, metrics={"train-loss": 1.0}),  # no count
        reply(305, content=two_records),
        reply(306, metrics={"num-examples": [1, 2], "train-loss": 1.0}),
        reply(307, metrics={"num-examples": -4, "train-loss": 1.0}),
        reply(308, error=Error(code=3, reason="client crashed")),
        reply(309, metrics={"num-examples": 5, "train-loss": 1.0, "extra": 2.0}),  # screened like any other
        reply(BENIGN[0]),  # a second reply from one node
    ]
    with caplog.at_level(logging.INFO, logger="flwr"):
        arrays, metrics = strategy.aggregate_train(1, good + bad)

    record = strategy.results[-1]
    result, dropped = record["screening"], record["dropped"]
    for node in (301, 302, 303, 307):
        assert result.rejected[node].startswith("invalid:"), (node, result.rejected[node])
    assert "'h.1.ln_1.bias'" in result.rejected[302]
    assert "error reply" in dropped[308] and "client crashed" in dropped[308]
    assert "'num-examples'" in dropped[304]
    assert "one ArrayRecord" in dropped[305]
    assert "single number" in dropped[306]
    assert 309 not in dropped and 309 in set(result.retained) | set(result.rejected)
    assert "more than one reply" in dropped[BENIGN[0]]
    assert "client crashed" in caplog.text

    survivors = set(BENIGN[1:]) | ({309} & set(result.retained))
    assert set(result.retained) == survivors
    assert set(ATTACKERS) <= set(result.rejected)
    assert set(inner.received[-1]) == survivors
    assert metrics["fedlns-dropped"] == len(dropped)
    assert all(np.isfinite(value).all() for value in arrayrecord_to_numpy(arrays).values())
    assert not set(strategy.screener.bank.ids) & {301, 302, 303, 304, 305, 306, 307, 308}


def test_a_round_with_only_error_replies_keeps_the_arrays():
    strategy = FedLNSStrategy(strategy=FedAvg(), screener=make_screener())
    sent, _ = configure(strategy)
    arrays, metrics = strategy.aggregate_train(1, [reply(node, error=Error(code=1, reason="x")) for node in BENIGN])
    assert arrays is sent
    assert metrics["fedlns-dropped"] == len(BENIGN)
    assert strategy.screener.round_ == 0


def test_aggregate_without_configure_is_a_clear_error():
    strategy = FedLNSStrategy(strategy=FedAvg(), screener=make_screener())
    with pytest.raises(RuntimeError, match="configure_train"):
        strategy.aggregate_train(3, [reply(101)])


def test_flower_dp_wrapper_can_wrap_fedlns():
    nodes = BENIGN + ATTACKERS
    fedlns = FedLNSStrategy(strategy=RecordingFedAvg(), screener=make_screener())
    dp = DifferentialPrivacyServerSideFixedClipping(
        fedlns, noise_multiplier=0.0, clipping_norm=1e6, num_sampled_clients=len(nodes)
    )
    arrays = numpy_to_arrayrecord(global_arrays())
    list(dp.configure_train(1, arrays, ConfigRecord(), FakeGrid(nodes)))
    replies = [reply(node, metrics={"num-examples": 10, "train-loss": 1.0}) for node in nodes]
    aggregated, _ = dp.aggregate_train(1, replies)
    assert aggregated is not None
    assert sorted(fedlns.strategy.received[-1]) == sorted(BENIGN)


def test_aggregate_warm_up_hands_every_valid_reply_on():
    inner = RecordingFedAvg()
    strategy = FedLNSStrategy(strategy=inner, screener=make_screener(activation_threshold=50, warmup="aggregate"))
    sent, _ = configure(strategy)
    arrays, metrics = strategy.aggregate_train(1, [reply(node) for node in BENIGN + ATTACKERS])
    assert sorted(inner.received[-1]) == sorted(BENIGN + ATTACKERS)
    assert arrays is not sent and metrics["fedlns-active"] == 0
