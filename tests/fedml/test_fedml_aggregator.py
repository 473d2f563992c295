"""FedLNSServerAggregator on hand-built (sample_num, state_dict) lists, as FedML's servers pass them."""

import json
import logging
import types
from collections import OrderedDict

import numpy as np
import pytest
import torch
from fedml.core import Context

from fedlns_core import FedLNS
from fedlns_fedml import FedLNSServerAggregator, RoundRecord

N_HONEST, N_DEVIANT = 9, 3


def make_model(dtype=torch.float32):
    torch.manual_seed(0)
    model = torch.nn.Sequential(OrderedDict(
        fc=torch.nn.Linear(4, 8), ln=torch.nn.LayerNorm(8), head=torch.nn.Linear(8, 3)))
    return model.to(dtype)


def upload(model, seed, ln_shift=0.0):
    """A client's returned state dict: small noise everywhere, plus a shift of the LayerNorm."""
    generator = torch.Generator().manual_seed(seed)
    state = OrderedDict()
    for key, value in model.state_dict().items():
        noise = 0.01 * torch.randn(value.shape, generator=generator, dtype=torch.float32)
        if key.startswith("ln."):
            noise = noise + ln_shift
        state[key] = (value.float() + noise).to(value.dtype)
    return state


def federation(model):
    """Nine honest clients and three whose LayerNorm moved a lot, in a shuffled list order."""
    entries = [(100 + 10 * i, upload(model, seed=i)) for i in range(N_HONEST)]
    entries += [(100, upload(model, seed=50 + i, ln_shift=0.5)) for i in range(N_DEVIANT)]
    order = np.random.default_rng(1).permutation(len(entries))
    return [entries[i] for i in order], [int(i) >= N_HONEST for i in order]


def make_aggregator(model, client_ids=None, args=None, **kwargs):
    args = types.SimpleNamespace(**(args or {}))
    if client_ids is not None:
        args.client_id_list = json.dumps(client_ids)
    kwargs.setdefault("screener", FedLNS.paper(activation_threshold=10, random_state=0))
    return FedLNSServerAggregator(model, args, **kwargs)


def clone(entries):
    return [(n, OrderedDict((k, v.clone()) for k, v in sd.items())) for n, sd in entries]


@pytest.fixture(autouse=True)
def empty_context():
    """FedML's Context is a process-wide singleton: no round ids leak between tests."""
    Context().add(Context.KEY_CLIENT_ID_LIST_IN_THIS_ROUND, None)
    yield
    Context().add(Context.KEY_CLIENT_ID_LIST_IN_THIS_ROUND, None)


@pytest.mark.parametrize("total", [12, 100])
def test_a_federation_too_small_to_activate_the_screener_is_warned_about(caplog, total):
    """FedLNS()'s activation_threshold is 100: FedML's args say how many clients there are, so a federation of 12
    that would never be screened is told so when the aggregator is built."""
    with caplog.at_level(logging.WARNING, logger="fedlns_fedml"):
        make_aggregator(make_model(), screener=FedLNS(random_state=0), args={"client_num_in_total": total})
    warned = "FedLNS will not screen: activation_threshold=100, but args.client_num_in_total=12" in caplog.text
    assert warned == (total == 12)
    assert (total == 12) == ("FedLNS.for_federation(num_clients, clients_per_round)" in caplog.text)


def test_positions_map_to_fedml_client_ids_and_deviants_are_rejected():
    model = make_model()
    entries, deviant = federation(model)
    client_ids = [700 + 3 * k for k in range(len(entries))]  # FedML's edge ids, not positions
    aggregator = make_aggregator(model, client_ids)

    kept, positions = aggregator.on_before_aggregation(entries)

    record = aggregator.records[-1]
    assert isinstance(record, RoundRecord) and record.screening.active
    assert record.client_ids == tuple(client_ids)
    deviant_ids = {client_ids[k] for k in range(len(entries)) if deviant[k]}
    assert set(record.rejected) == deviant_ids
    assert all(reason.startswith("screened:") for reason in record.rejected.values())
    assert positions == [k for k in range(len(entries)) if not deviant[k]]
    assert [id(sd) for _, sd in kept] == [id(entries[k][1]) for k in positions]
    assert set(aggregator.screener.bank.ids) == set(client_ids)


def test_retained_models_are_sample_weighted_around_the_global_copy():
    model = make_model()
    entries, deviant = federation(model)
    aggregator = make_aggregator(model, list(range(1, len(entries) + 1)))
    global_before = {k: v.clone() for k, v in model.state_dict().items()}

    kept, positions = aggregator.on_before_aggregation(entries)
    new_global = aggregator.aggregate(kept)

    weights = aggregator.records[-1].screening.weights
    total = sum(entries[k][0] for k in positions)
    assert weights == pytest.approx({k + 1: entries[k][0] / total for k in positions})
    for key, reference in global_before.items():
        expected = reference.double() + sum(
            entries[k][0] / total * (entries[k][1][key].double() - reference.double()) for k in positions)
        torch.testing.assert_close(new_global[key].double(), expected, rtol=0, atol=1e-6)
        assert new_global[key].dtype == reference.dtype
    assert isinstance(new_global, OrderedDict) and list(new_global) == list(global_before)


def test_warm_up_holds_the_global_model():
    model = make_model()
    entries, _ = federation(model)
    aggregator = make_aggregator(model, list(range(len(entries))),
                                 screener=FedLNS.paper(activation_threshold=50, random_state=0))
    kept, positions = aggregator.on_before_aggregation(entries)
    assert kept == [] and positions == []
    assert not aggregator.records[-1].screening.active
    new_global = aggregator.aggregate(kept)
    for key, value in model.state_dict().items():
        assert torch.equal(new_global[key], value)


def test_bad_entries_are_rejected_with_reasons_and_the_round_goes_on():
    model = make_model()
    entries, deviant = federation(model)
    good = upload(model, seed=99)
    nan_state = OrderedDict(good, **{"fc.weight": good["fc.weight"].clone().fill_(float("nan"))})
    missing = OrderedDict((k, v) for k, v in good.items() if k != "head.bias")
    wrong_shape = OrderedDict(good, **{"ln.weight": torch.ones(9)})
    not_a_tensor = OrderedDict(good, **{"ln.bias": "zeros"})
    bad = [(100, nan_state), (100, missing), (100, wrong_shape), (0, good), (-5, good),
           (None, good), ("not", "a pair", "at all"), (100, not_a_tensor)]
    all_entries = entries + bad
    client_ids = [f"edge-{k}" for k in range(len(all_entries))]
    aggregator = make_aggregator(model, client_ids)

    kept, positions = aggregator.on_before_aggregation(all_entries)
    new_global = aggregator.aggregate(kept)

    rejected = aggregator.records[-1].rejected
    bad_ids = client_ids[len(entries):]
    expected_words = ["non-finite", "missing key", "shape", "positive", "positive", "positive",
                      "pair", "expected a real tensor"]
    for client_id, word in zip(bad_ids, expected_words):
        assert rejected[client_id].startswith("invalid:") and word in rejected[client_id], rejected[client_id]
    assert not set(bad_ids) & set(aggregator.screener.bank.ids)
    assert positions == [k for k in range(len(entries)) if not deviant[k]]
    assert all(torch.isfinite(value).all() for value in new_global.values())


def test_inputs_are_not_mutated():
    model = make_model()
    entries, _ = federation(model)
    before = clone(entries)
    model_before = {k: v.clone() for k, v in model.state_dict().items()}
    aggregator = make_aggregator(model, list(range(len(entries))))
    new_global = aggregator.aggregate(aggregator.on_before_aggregation(entries)[0])
    for (n, state), (n0, state0) in zip(entries, before):
        assert n == n0 and all(torch.equal(state[k], state0[k]) for k in state0)
    for key, value in model.state_dict().items():
        assert torch.equal(value, model_before[key])            # aggregate() does not install
    returned = new_global["ln.weight"].clone()
    new_global["ln.weight"].add_(1.0)                             # nor is it a view of its copy
    assert torch.equal(aggregator.global_state["ln.weight"], returned)


def test_global_copy_ignores_in_place_training_and_follows_aggregate_and_set_model_params():
    model = make_model()
    aggregator = make_aggregator(model, [1, 2])
    initial = aggregator.global_state
    with torch.no_grad():                                         # sp: clients train this very model
        model.ln.weight.add_(3.0)
    assert torch.equal(aggregator.global_state["ln.weight"], initial["ln.weight"])
    entries, _ = federation(model)
    aggregator.set_round_client_ids(list(range(len(entries))))
    returned = aggregator.aggregate(entries)                      # as on the cross-device server
    assert torch.equal(aggregator.global_state["fc.weight"], returned["fc.weight"])
    installed = upload(model, seed=5)
    aggregator.set_model_params(installed)
    assert torch.equal(aggregator.global_state["ln.weight"], installed["ln.weight"])
    assert torch.equal(model.ln.weight.detach(), installed["ln.weight"])


def test_client_id_sources_in_order_of_preference():
    model = make_model()
    entries, _ = federation(model)
    count = len(entries)
    aggregator = make_aggregator(model, list(range(100, 100 + count)))
    Context().add(Context.KEY_CLIENT_ID_LIST_IN_THIS_ROUND, list(range(200, 200 + count)))

    aggregator.set_round_client_ids([f"c{k}" for k in range(count)])
    aggregator.on_before_aggregation(entries)
    assert aggregator.records[-1].client_ids[0] == "c0"           # explicit ids, used once
    aggregator.on_before_aggregation(entries)
    assert aggregator.records[-1].client_ids[0] == 100            # then args.client_id_list

    no_list = make_aggregator(model)
    no_list.on_before_aggregation(entries)
    assert no_list.records[-1].client_ids[0] == 200               # then FedML's Context

    Context().add(Context.KEY_CLIENT_ID_LIST_IN_THIS_ROUND, [1, 2])
    with pytest.raises(RuntimeError, match="cannot name"):
        no_list.on_before_aggregation(entries)
    no_list.set_round_client_ids([1, 2, 3])
    with pytest.raises(ValueError, match="3 ids for a list of"):
        no_list.on_before_aggregation(entries)


def test_aggregate_alone_screens_first_as_on_the_cross_device_server():
    model = make_model()
    entries, deviant = federation(model)
    aggregator = make_aggregator(model, list(range(len(entries))))
    new_global = aggregator.aggregate(entries)
    record = aggregator.records[-1]
    assert set(record.rejected) == {k for k in range(len(entries)) if deviant[k]}
    reference = make_aggregator(make_model(), list(range(len(entries))))
    expected = reference.aggregate(reference.on_before_aggregation(entries)[0])
    for key in expected:
        torch.testing.assert_close(new_global[key], expected[key])


def test_user_aggregator_aggregates_the_retained_updates():
    model = make_model()
    entries, deviant = federation(model)

    def coordinate_median(updates, num_examples):
        keys = next(iter(updates.values())).keys()
        return {key: np.median(np.stack([update[key] for update in updates.values()]), axis=0) for key in keys}

    aggregator = make_aggregator(model, list(range(len(entries))), aggregator=coordinate_median)
    kept, positions = aggregator.on_before_aggregation(entries)
    new_global = aggregator.aggregate(kept)
    base = model.state_dict()["head.weight"].double()
    median = torch.stack([entries[k][1]["head.weight"].double() - base for k in positions]).median(dim=0)
    # torch's median takes the lower middle value; numpy's averages the two (9 retained: same).
    torch.testing.assert_close(new_global["head.weight"].double(), base + median.values, rtol=0, atol=1e-6)


def test_half_precision_models_come_back_in_their_dtype():
    model = make_model(torch.bfloat16)
    entries, deviant = federation(model)
    aggregator = make_aggregator(model, list(range(len(entries))))
    new_global = aggregator.aggregate(aggregator.on_before_aggregation(entries)[0])
    assert set(aggregator.records[-1].rejected) == {k for k in range(len(entries)) if deviant[k]}
    assert all(value.dtype == torch.bfloat16 for value in new_global.values())


def test_decisions_are_logged_and_the_screener_resumes(tmp_path):
    model = make_model()
    entries, deviant = federation(model)
    state_path, log_path = tmp_path / "screener.npz", tmp_path / "decisions.jsonl"
    client_ids = list(range(len(entries)))
    first = make_aggregator(model, client_ids, state_path=state_path, log_path=log_path)
    first.on_before_aggregation(entries)

    second = make_aggregator(model, client_ids, state_path=state_path, log_path=log_path,
                             screener=FedLNS.paper(activation_threshold=999))
    assert second.screener.round_ == 1 and second.screener.activation_threshold == 10
    second.on_before_aggregation(entries)
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [line["screening"]["round"] for line in lines] == [0, 1]
    assert sorted(node for node, _ in lines[1]["screening"]["rejected"]) == sorted(   # [id, reason] pairs
        k for k in client_ids if deviant[k])


def test_constructor_rejects_a_missing_screener_and_fhe():
    model = make_model()
    with pytest.raises(TypeError, match="FedLNS"):
        FedLNSServerAggregator(model, types.SimpleNamespace(), screener=None)
    with pytest.raises(ValueError, match="encrypted"):
        FedLNSServerAggregator(model, types.SimpleNamespace(enable_fhe=True), screener=FedLNS.paper())


def test_cross_silo_server_aggregator_runs_the_hooks_and_maps_kept_indices_to_edge_ids():
    """FedML's own cross-silo FedMLAggregator: uploads stored by client_real_ids.index(sender)."""
    from fedml.cross_silo.server.fedml_aggregator import FedMLAggregator

    model = make_model()
    entries, deviant = federation(model)
    edge_ids = [40 + 7 * k for k in range(len(entries))]
    args = types.SimpleNamespace(client_id_list=json.dumps(edge_ids), dataset="hand_built",
                                 round_idx=0, comm_round=1, frequency_of_the_test=1)
    aggregator = FedLNSServerAggregator(model, args, screener=FedLNS.paper(activation_threshold=10, random_state=0))
    server = FedMLAggregator(None, None, 0, {}, {}, {}, len(edge_ids), torch.device("cpu"), args, aggregator)
    Context().add(Context.KEY_CLIENT_ID_LIST_IN_THIS_ROUND, edge_ids)
    for sender_id, (sample_num, state) in reversed(list(zip(edge_ids, entries))):   # any arrival order
        server.add_local_trained_result(edge_ids.index(sender_id), state, sample_num)
    assert server.check_whether_all_receive()

    global_params, model_list, kept_indexes = server.aggregate()

    # What FedMLServerManager does next with the indexes: they must name the retained edges.
    kept_edges = [edge_ids[index] for index in kept_indexes]
    assert kept_edges == [edge_ids[k] for k in range(len(entries)) if not deviant[k]]
    assert kept_edges == list(aggregator.records[-1].screening.retained)
    assert len(model_list) == len(kept_indexes)
    assert torch.equal(aggregator.global_state["ln.weight"], global_params["ln.weight"])
    assert torch.equal(model.ln.weight.detach(), global_params["ln.weight"])   # installed by FedML


def test_aggregate_refuses_a_list_other_than_the_one_handed_out():
    model = make_model()
    entries, _ = federation(model)
    aggregator = make_aggregator(model, list(range(len(entries))))
    kept, _ = aggregator.on_before_aggregation(entries)
    with pytest.raises(RuntimeError, match="different list"):
        aggregator.aggregate(clone(kept))
    assert aggregator.screener.round_ == 1                       # the round was not screened twice


def test_integer_buffers_of_batch_norm_pass_through():
    torch.manual_seed(0)
    model = torch.nn.Sequential(OrderedDict(fc=torch.nn.Linear(4, 8), bn=torch.nn.BatchNorm1d(8),
                                            ln=torch.nn.LayerNorm(8)))
    entries, _ = federation(model)
    aggregator = make_aggregator(model, list(range(len(entries))))
    new_global = aggregator.aggregate(aggregator.on_before_aggregation(entries)[0])
    assert new_global["bn.num_batches_tracked"].dtype == torch.int64
    assert set(new_global) == set(model.state_dict())
    model.load_state_dict(new_global)


class _Unconvertible(torch.Tensor):
    """A tensor whose conversion to numpy fails in a way the adapter did not foresee."""

    def detach(self):
        raise RuntimeError("cannot detach\nINFO forged line")


def test_hostile_entries_are_rejected_and_the_others_decided_as_without_them():
    model = make_model()
    entries, deviant = federation(model)
    good = upload(model, seed=99)
    huge = OrderedDict(good, **{"ln.weight": torch.full((8,), 1e38)})
    as_double = OrderedDict(good, **{"ln.bias": torch.full((8,), 1e300, dtype=torch.float64)})
    odd = OrderedDict(good, **{"ln.bias": torch.zeros(8).as_subclass(_Unconvertible)})
    hostile = [(100, huge), (100, as_double), (100, odd), (1e308, good), (5e-324, good)]
    client_ids = list(range(len(entries))) + [f"h{k}" for k in range(len(hostile))]
    reference = make_aggregator(model, list(range(len(entries))))
    reference.on_before_aggregation(entries)
    aggregator = make_aggregator(model, client_ids)
    kept, positions = aggregator.on_before_aggregation(entries + hostile)
    record = aggregator.records[-1]
    for k in range(len(hostile)):
        assert record.rejected[f"h{k}"].startswith("invalid:"), record.rejected[f"h{k}"]
    assert "\n" not in record.rejected["h2"]
    assert positions == [k for k in range(len(entries)) if not deviant[k]]
    assert record.screening.retained == reference.records[-1].screening.retained
    assert record.screening.rejected.keys() - {f"h{k}" for k in range(len(hostile))} == \
        reference.records[-1].screening.rejected.keys()
    assert not {f"h{k}" for k in range(len(hostile))} & set(aggregator.screener.bank.ids)
    new_global = aggregator.aggregate(kept)
    assert all(torch.isfinite(value).all() and value.dtype == torch.float32 for value in new_global.values())


def test_a_round_that_cannot_be_screened_keeps_the_global_model(monkeypatch, tmp_path):
    from fedlns_core import _screening

    model = make_model()
    entries, _ = federation(model)
    aggregator = make_aggregator(model, list(range(len(entries))), log_path=tmp_path / "log.jsonl")

    def broken(*args, **kwargs):
        raise ValueError("mixture failed")
    monkeypatch.setattr(_screening, "bic_gmm_retain", broken)
    kept, positions = aggregator.on_before_aggregation(entries)
    assert kept == [] and positions == []
    record = aggregator.records[-1]
    assert record.screening is None and "mixture failed" in record.error
    assert aggregator.screener.round_ == 0 and len(aggregator.screener.bank) == 0
    new_global = aggregator.aggregate(kept)
    for key, value in model.state_dict().items():
        assert torch.equal(new_global[key], value)
    assert json.loads((tmp_path / "log.jsonl").read_text())["error"].endswith("mixture failed")


def test_constructor_checks_aggregator_and_paths(tmp_path):
    model = make_model()
    with pytest.raises(TypeError, match="aggregator"):
        make_aggregator(model, [1], aggregator=3)
    with pytest.warns(FutureWarning, match="aggregator="):            # the keyword's former name
        assert make_aggregator(model, [1], rule=len).aggregator is len
    with pytest.raises(ValueError, match="directory"):
        make_aggregator(model, [1], log_path=tmp_path)
    with pytest.raises(ValueError, match="n_init"):
        make_aggregator(model, [1], screener=FedLNS.paper(n_init=0))


class _LoraLinear(torch.nn.Module):
    """A linear layer with a LoRA adapter named as a PeftModel's state dict names it (``lora_A.default``)."""

    def __init__(self, d_in, d_out, rank=2):
        super().__init__()
        self.base_layer = torch.nn.Linear(d_in, d_out)
        self.lora_A = torch.nn.ModuleDict({"default": torch.nn.Linear(d_in, rank, bias=False)})
        self.lora_B = torch.nn.ModuleDict({"default": torch.nn.Linear(rank, d_out, bias=False)})


def test_a_lora_model_with_frozen_norms_is_screened_by_its_lora_signature():
    """FedML sends the full state dict: frozen base weights and norms come back unchanged, the adapters move;
    FedLNS() reads the LoRA factors only and rejects the clients that moved them far more."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(OrderedDict(q=_LoraLinear(8, 8), ln=torch.nn.LayerNorm(8), v=_LoraLinear(8, 8)))
    generator = torch.Generator().manual_seed(3)

    def upload(scale):
        return OrderedDict((key, value + scale * torch.randn(value.shape, generator=generator)
                            if ".lora_" in key else value.clone()) for key, value in model.state_dict().items())

    entries = [(100, upload(0.01)) for _ in range(N_HONEST)] + [(100, upload(0.3)) for _ in range(N_DEVIANT)]
    aggregator = make_aggregator(model, list(range(len(entries))),
                                 screener=FedLNS(activation_threshold=len(entries), random_state=0))
    kept, positions = aggregator.on_before_aggregation(entries)
    screening = aggregator.records[-1].screening
    assert screening.signature == "lora" and len(screening.signature_keys) == 4
    assert set(screening.rejected) == set(range(N_HONEST, len(entries))), screening.explain()
    assert positions == list(range(N_HONEST))
