"""Hostile input against the core: each known hostile input as a named reproducer, then properties over hostile clients.

The property: for a round of valid clients plus one hostile client, ``screen()`` completes, the hostile
client is rejected with an ``"invalid: ..."`` reason or decided by the mixture like anyone else, the bank
holds no entry of a rejected client and only finite values, and the others are decided as in the round
without it.
"""

import json
import os
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedlns_core import FedLNS, HistoryBank, ScreeningJournal, ScreeningResult
from fedlns_core import _screening

NORM_KEYS = ("h.0.ln_1.weight", "h.0.ln_1.bias", "h.1.ln_2.weight")
BENIGN, ATTACKERS = tuple(range(9)), (9, 10, 11)
HOSTILE = "hostile"


def make_global(dtype=np.float32):
    g = {key: np.full(16, 1.0 if key.endswith("weight") else 0.0, dtype=dtype) for key in NORM_KEYS}
    g["h.0.mlp.weight"] = np.zeros((3, 3), dtype=dtype)
    return g


def make_round(g, seed=0):
    rng = np.random.default_rng(seed)
    clients = {}
    for cid in BENIGN + ATTACKERS:
        clients[cid] = {key: (value + 0.01 * rng.standard_normal(value.shape)
                              + (0.5 if cid in ATTACKERS and key in NORM_KEYS else 0.0)).astype(value.dtype)
                        for key, value in g.items()}
    return clients, {cid: 50.0 + cid for cid in clients}


def with_client(clients, counts, params, count=100.0):
    return {**clients, HOSTILE: params}, {**counts, HOSTILE: count}


def replaced(g, clients, key, value):
    params = {k: v.copy() for k, v in clients[0].items()}
    params[key] = value
    return params


def screen(clients, counts, g=None, **settings):
    screener = FedLNS.paper(activation_threshold=settings.pop("activation_threshold", 0), random_state=0, **settings)
    return screener, screener.screen(make_global() if g is None else g, clients, counts)


def others(result: ScreeningResult):
    """The decision about everyone but the hostile client."""
    return ({c for c in result.retained if c != HOSTILE},
            {c: r for c, r in result.rejected.items() if c != HOSTILE})


def assert_bank_clean(screener, hostile_rejected_as_invalid=True):
    if hostile_rejected_as_invalid:
        assert HOSTILE not in screener.bank
    columns = screener.bank._columns[:, : len(screener.bank)]
    assert np.isfinite(columns).all() and (np.abs(columns) < 1e6).all()


# ------------------------------------------------------------------------------ named reproducers

def test_reproducer_1e300_norm_does_not_disable_screening():
    g = make_global(np.float64)
    clients, counts = make_round(g)
    _, reference = screen(clients, counts, g)
    assert set(reference.rejected) == set(ATTACKERS)
    hostile = replaced(g, clients, "h.0.ln_1.weight", np.full(16, 1e300))
    screener, result = screen(*with_client(clients, counts, hostile), g)
    assert result.rejected[HOSTILE].startswith("invalid: standardized deviation")
    assert set(result.rejected) == set(ATTACKERS) | {HOSTILE}          # the screen stays on
    assert others(result) == others(reference) and result.scores == reference.scores
    assert_bank_clean(screener)
    new = result.aggregate(g, {**clients, HOSTILE: hostile})
    assert all(np.abs(value).max() < 10 for value in new.values())


def test_reproducer_1e307_norm_neither_crashes_nor_half_commits():
    g = make_global(np.float64)
    clients, counts = make_round(g)
    hostile = replaced(g, clients, "h.0.ln_1.bias", np.full(16, 1e307))
    screener, result = screen(*with_client(clients, counts, hostile), g)
    assert result.rejected[HOSTILE].startswith("invalid:")
    assert screener.round_ == 1 and len(screener.bank) == len(clients)
    assert_bank_clean(screener)


def test_reproducer_failed_round_changes_nothing(monkeypatch, tmp_path):
    g = make_global()
    clients, counts = make_round(g)
    screener = FedLNS.paper(activation_threshold=0, random_state=0)
    screener.screen(g, clients, counts)
    screener.save(tmp_path / "before.npz")
    before = (screener.round_, screener.bank.ids, screener.bank._columns[:, : len(screener.bank)].copy())

    def broken(*args, **kwargs):
        raise ValueError("the mixture's BIC is not finite ({1: nan, 2: nan}); refusing to decide")
    monkeypatch.setattr(_screening, "bic_gmm_retain", broken)
    fresh, _ = make_round(g, seed=1)
    with pytest.raises(ValueError, match="round 1 cannot be screened, nothing was changed: .*BIC"):
        screener.screen(g, {**fresh, 99: fresh[0]}, {**counts, 99: 10.0})
    assert (screener.round_, screener.bank.ids) == before[:2] and 99 not in screener.bank
    np.testing.assert_array_equal(screener.bank._columns[:, : len(screener.bank)], before[2])


@pytest.mark.parametrize("value", [np.ones(16, np.complex64), np.ones(16, "m8[s]"), np.ones(16, "M8[s]"),
                                   np.ones(16, bool), np.array(["1.0"] * 16), np.array([1.0] * 16, object)],
                         ids=["complex64", "timedelta", "datetime", "bool", "str", "object"])
def test_reproducer_non_real_dtypes_are_rejected_and_aggregation_works(value):
    g = make_global()
    clients, counts = make_round(g)
    screener, result = screen(*with_client(clients, counts, replaced(g, clients, "h.0.ln_1.weight", value)))
    assert "unsupported dtype" in result.rejected[HOSTILE]
    assert HOSTILE not in screener.bank
    result.aggregate(g, {**clients, HOSTILE: value})


class RaisingArray:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("no\nINFO forged line")


@pytest.mark.parametrize("value", [[[1.0] * 15, [1.0]], RaisingArray()], ids=["ragged", "raising"])
def test_reproducer_unreadable_arrays_are_rejected_not_raised(value):
    g = make_global()
    clients, counts = make_round(g)
    _, result = screen(*with_client(clients, counts, replaced(g, clients, "h.0.ln_1.weight", value)))
    assert "cannot be read as an array" in result.rejected[HOSTILE]
    assert "\n" not in result.rejected[HOSTILE] and "\n" not in result.explain().split("\n")[-1]


def test_reproducer_huge_count_cannot_take_over_the_average():
    g = make_global()
    clients, counts = make_round(g)
    counts = {cid: 100.0 for cid in clients}
    _, reference = screen(clients, counts)
    for claimed, reason in [(1e300, "exceeds the largest accepted count"), (1e308, "exceeds"),
                            (5e-324, "subnormal"), (10**400, "not representable")]:
        _, result = screen(clients, {**counts, 0: claimed})
        assert reason in result.rejected[0]
        assert others(result)[0] == set(reference.retained) - {0}
        result.aggregate(g, clients)
    _, result = screen(clients, {**counts, 0: 1e6})                   # within 2**53 but 10,000 x median
    assert result.capped_counts == {0: 1e6} and result.num_examples[0] == 1000.0
    assert result.weights[0] == pytest.approx(1000.0 / (1000.0 + 100.0 * 8))


def test_counts_within_the_bound_keep_the_papers_weights():
    g = make_global()
    clients, counts = make_round(g)
    _, result = screen(clients, counts)
    total = sum(counts[c] for c in result.retained)
    assert result.weights == pytest.approx({c: counts[c] / total for c in result.retained})
    assert result.capped_counts == {}
    _, uncapped = screen(clients, {**counts, 0: 1e6}, max_count_ratio=None)
    assert uncapped.capped_counts == {} and uncapped.num_examples[0] == 1e6


def test_reproducer_tiny_normal_count_does_not_crash_aggregate():
    g = make_global()
    clients, counts = make_round(g)
    _, result = screen(clients, {**counts, 0: 1e-300})
    new = result.aggregate(g, clients)
    assert all(np.isfinite(value).all() for value in new.values())
    assert sum(result.weights.values()) == pytest.approx(1.0)


def test_reproducer_float64_client_beyond_the_float32_global_is_rejected():
    g = make_global(np.float32)
    clients, counts = make_round(g)
    hostile = replaced(g, clients, "h.0.mlp.weight", np.full((3, 3), 1e300))     # not a norm key
    _, result = screen(*with_client(clients, counts, hostile), g)
    assert "range its global dtype can average" in result.rejected[HOSTILE]
    new = result.aggregate(g, {**clients, HOSTILE: hostile})
    assert all(value.dtype == np.float32 and np.isfinite(value).all() for value in new.values())


def test_reproducer_settings_one_table_numpy_ints_and_negative_seed():
    g = make_global()
    clients, counts = make_round(g)
    screener = FedLNS.paper(activation_threshold=np.int64(3), n_init=np.int32(2), max_clients=np.int64(50),
                      random_state=np.int64(7))
    screener.screen(g, clients, counts)
    bank = HistoryBank(max_clients=np.int64(4), random_state=np.uint8(3))
    bank.update({1: {"a.ln.weight": np.zeros(2)}})
    bad = FedLNS.paper(activation_threshold=0, random_state=-1)
    with pytest.raises(ValueError, match="random_state must be"):
        bad.screen(g, clients, counts)
    assert bad.round_ == 0 and len(bad.bank) == 0
    with pytest.raises(ValueError, match="max_count_ratio must be"):
        FedLNS.paper(max_count_ratio=0.5).validate_params()


def _tamper(path, out, mutate_header=None, extra=None):
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    header_name = "__fedlns_header__.npy"
    if mutate_header is not None:
        import io
        text = str(np.load(io.BytesIO(members[header_name]))[()])
        buffer = io.BytesIO()
        np.save(buffer, np.array(mutate_header(text)))
        members[header_name] = buffer.getvalue()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        for name, (data, method) in (extra or {}).items():
            archive.writestr(zipfile.ZipInfo(name), data, compress_type=method)
    return out


@pytest.mark.parametrize("mutate, words", [
    (lambda text: text.replace('"round": 1', '"round": -1'), "round must be an int >= 0"),
    (lambda text: text.replace('"round": 1', '"round": 1.5'), "round must be an int >= 0"),
    (lambda text: text.replace('"round": 1', '"round": 1e999'), "round must be an int >= 0"),
    (lambda text: text.replace('"round": 1', '"round": ' + "9" * 5000), "corrupt"),
    (lambda text: text.replace('"params": {', '"params": {"x": ' + "[" * 100000 + "]" * 100000 + ', '), "corrupt"),
    (lambda text: text.replace('"n_init": 5', '"n_init": [5]'), "n_init must be"),
    (lambda text: text.replace('"ids": [0,', '"ids": [[0],'), "invalid history-bank state"),
    (lambda text: text.replace('"ids": [', '"ids": [99, '), "shape"),
    (lambda text: text.replace('"params": {', '"params": {"unknown": 1, '), "unknown setting"),
    (lambda text: text.replace('"random_state": 0', '"random_state": -1'), "random_state must be"),
])
def test_reproducer_load_raises_only_value_error(tmp_path, mutate, words):
    g = make_global()
    clients, counts = make_round(g)
    screener = FedLNS.paper(activation_threshold=0, random_state=0)
    screener.screen(g, clients, counts)
    screener.save(tmp_path / "good.npz")
    bad = _tamper(tmp_path / "good.npz", tmp_path / "bad.npz", mutate_header=mutate)
    with pytest.raises(ValueError, match=words):
        FedLNS.load(bad)


def test_reproducer_unexpected_compressed_array_is_never_decompressed(tmp_path, monkeypatch):
    screener = FedLNS.paper()
    screener.save(tmp_path / "good.npz")
    bomb = b"\0" * (32 << 20)              # 32 MB of zeros, a few kB compressed
    bad = _tamper(tmp_path / "good.npz", tmp_path / "bomb.npz", extra={"extra.npy": (bomb, zipfile.ZIP_DEFLATED)})
    assert os.path.getsize(bad) < 200_000
    del bomb
    opened = []
    original = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, name, *a, **k: opened.append(
        getattr(name, "filename", name)) or original(self, name, *a, **k))
    with pytest.raises(ValueError, match="unexpected member 'extra.npy'"):
        FedLNS.load(bad)
    assert "extra.npy" not in opened
    # A compressed copy of an expected member is refused too.
    with zipfile.ZipFile(tmp_path / "good.npz") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(tmp_path / "deflated.npz", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(ValueError, match="compressed"):
        FedLNS.load(tmp_path / "deflated.npz")


def test_reproducer_orphan_temp_files_are_cleaned(tmp_path):
    path = tmp_path / "state.npz"
    orphan = tmp_path / ".state.npz.abc123.tmp"
    orphan.write_bytes(b"half a save")
    unrelated = tmp_path / ".other.npz.abc123.tmp"
    unrelated.write_bytes(b"someone else's")
    FedLNS.paper().save(path)
    assert not orphan.exists() and unrelated.exists()
    FedLNS.load(path)


def test_reproducer_to_dict_keeps_1_and_str_1_apart_and_is_strict_json():
    g = make_global()
    clients, counts = make_round(g)
    clients = {**clients, "1": clients[1]}
    counts = {**counts, "1": counts[1]}
    _, result = screen(clients, counts)
    decoded = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert {1, "1"} <= {cid for cid, _ in decoded["labels"]}
    nan_result = ScreeningResult(round=0, active=True, bank_size=1, retained=(1,), rejected={},
                                 scores={1: float("nan")}, bic={1: float("inf")})
    decoded = json.loads(json.dumps(nan_result.to_dict(), allow_nan=False))
    assert decoded["scores"] == [[1, None]] and decoded["bic"] == {"1": None}


def test_reproducer_client_text_cannot_forge_log_lines(tmp_path):
    journal = ScreeningJournal(log_path=tmp_path / "log.jsonl")
    journal.record(None, {"reason": "crashed\nINFO forged\u2028line\r"})
    text = (tmp_path / "log.jsonl").read_text()
    assert text.count("\n") == 1 and "\r" not in text and "\u2028" not in text
    assert json.loads(text)["reason"] == "crashed\nINFO forged\u2028line\r"
    with pytest.raises(TypeError, match="log_path"):
        ScreeningJournal(log_path=3)


def test_reproducer_reservoir_admission_does_not_sort_per_id():
    # 20,000 ids into a 5,000 bank in one refresh: one O(1) eviction per admission (82 s before, when
    # every admission sorted all ids). Kept small enough to be cheap; the timing lives in benchmarks/.
    bank = HistoryBank(max_clients=5000, random_state=0)
    bank.update_flat(list(range(20000)), np.zeros((20000, 2)), ["a.ln.weight"], [(2,)])
    assert len(bank) == 5000 and bank.n_seen == 20000


# ------------------------------------------------------------------------------------ the property

def _huge():
    magnitude = st.floats(min_value=1e10, max_value=1.7e38) | st.floats(min_value=1e38, max_value=1.7e308)
    return st.tuples(magnitude, st.sampled_from([1.0, -1.0]), st.sampled_from(NORM_KEYS),
                     st.booleans(), st.sampled_from([np.float32, np.float64])).map(_huge_client)


def _huge_client(spec):
    magnitude, sign, key, whole, dtype = spec
    def build(g, clients):
        value = clients[0][key].astype(np.float64)
        if whole:
            value = np.full_like(value, sign * magnitude)
        else:
            value[3] = sign * magnitude
        with np.errstate(over="ignore"):
            return ("huge", replaced(g, clients, key, value.astype(dtype)), 100.0)
    return build


def _non_finite():
    return st.tuples(st.sampled_from([np.nan, np.inf, -np.inf]), st.sampled_from(sorted(make_global()))).map(
        lambda spec: lambda g, clients: ("non-finite", replaced(
            g, clients, spec[1], np.where(np.arange(clients[0][spec[1]].size).reshape(clients[0][spec[1]].shape) == 0,
                                          spec[0], clients[0][spec[1]])), 100.0))


def _wrong_dtype():
    values = [np.complex64, np.complex128, bool, "m8[s]", "M8[D]", object, "U3", "S3"]
    return st.tuples(st.sampled_from(values), st.sampled_from(sorted(make_global()))).map(
        lambda spec: lambda g, clients: ("dtype", replaced(
            g, clients, spec[1], clients[0][spec[1]].astype(spec[0])), 100.0))


def _wrong_shape():
    return st.tuples(st.sampled_from(sorted(make_global())), st.sampled_from([(), (15,), (16, 1), (0,), (4, 4)])).map(
        lambda spec: lambda g, clients: ("shape", replaced(g, clients, spec[0], np.zeros(spec[1], np.float32)), 100.0))


def _unreadable():
    return st.sampled_from([[[1.0, 2.0], [3.0]], RaisingArray(), {"a": 1}, None]).map(
        lambda value: lambda g, clients: ("unreadable", replaced(g, clients, "h.0.ln_1.bias", value), 100.0))


def _hostile_count():
    counts = st.sampled_from([0, -1, -0.0, float("nan"), float("inf"), -float("inf"), 5e-324, 1e-320, 1e300,
                              1.7976931348623157e308, 2.0**53 + 2, 10**400, "12", None, True, [3], 1j])
    return counts.map(lambda count: lambda g, clients: ("count", {k: v.copy() for k, v in clients[0].items()}, count))


def _subnormal():
    # Subnormal values where they change nothing (a non-norm key) or as a vanishing change of a norm key:
    # the client looks like one that barely trained and is decided by the mixture like anyone else.
    return st.sampled_from(["h.0.mlp.weight", "h.0.ln_1.bias"]).map(
        lambda key: lambda g, clients: ("subnormal", replaced(
            g, clients, key, (g[key].astype(np.float64) + 5e-324) if key in NORM_KEYS
            else np.full(g[key].shape, 5e-324)), 100.0))


HOSTILE_CLIENTS = st.one_of(_huge(), _non_finite(), _wrong_dtype(), _wrong_shape(), _unreadable(),
                            _hostile_count(), _subnormal())


@settings(max_examples=60)
@given(HOSTILE_CLIENTS, st.integers(0, 3), st.sampled_from([0, 20]), st.sampled_from(["hold", "aggregate"]))
def test_one_hostile_client_never_changes_the_others_decisions(build, seed, threshold, warmup):
    g = make_global()
    clients, counts = make_round(g, seed)
    kind, params, count = build(g, clients)
    reference_screener, reference = screen(clients, counts, activation_threshold=threshold, warmup=warmup)
    screener, result = screen(*with_client(clients, counts, params, count),
                              activation_threshold=threshold, warmup=warmup)
    if kind == "subnormal":                 # decided like anyone else, never invalid
        assert HOSTILE not in result.rejected or result.rejected[HOSTILE].startswith("screened:")
        assert others(result)[0] == set(reference.retained) and set(others(result)[1]) == set(reference.rejected)
        assert_bank_clean(screener, hostile_rejected_as_invalid=False)
    else:
        assert result.rejected[HOSTILE].startswith("invalid: ")
        assert others(result) == others(reference)
        assert result.scores == reference.scores and result.weights == reference.weights
        assert result.bank_size == reference.bank_size == reference_screener.bank.__len__()
        assert_bank_clean(screener)
    new = result.aggregate(g, {**clients, HOSTILE: params})
    assert all(value.dtype == g[key].dtype and np.isfinite(value).all() for key, value in new.items())
    json.dumps(result.to_dict(), allow_nan=False)
