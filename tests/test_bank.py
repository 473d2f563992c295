import numpy as np
import pytest
from hypothesis import given, strategies as st

from fedlns_core import HistoryBank

KEYS = {"b.ln_1.weight": (2,), "a.ln_1.bias": (1,)}
ids = st.one_of(st.integers(0, 6), st.sampled_from(["x", "y", "z"]))
signature = st.lists(st.floats(-10, 10, allow_nan=False), min_size=3, max_size=3)
rounds = st.lists(st.dictionaries(ids, signature, max_size=5), min_size=1, max_size=8)


def as_signature(values):
    return {"b.ln_1.weight": np.array(values[:2]), "a.ln_1.bias": np.array(values[2:])}


@given(rounds, st.sampled_from([0.0, 0.5, 0.9]))
def test_bank_matches_a_plain_dict_oracle(sequence, ema):
    bank, oracle = HistoryBank(ema=ema), {}
    for round_signatures in sequence:
        bank.update({cid: as_signature(v) for cid, v in round_signatures.items()})
        for cid, values in round_signatures.items():       # eq. bank_refresh (with optional EMA)
            new = np.array(values)
            oracle[cid] = new if cid not in oracle else ema * oracle[cid] + (1 - ema) * new
    assert len(bank) == len(oracle) and set(bank.ids) == set(oracle)
    for cid, expected in oracle.items():
        assert cid in bank
        stored = bank[cid]
        np.testing.assert_allclose(np.concatenate([stored["b.ln_1.weight"], stored["a.ln_1.bias"]]), expected,
                                   rtol=1e-12, atol=1e-12)
    if oracle:
        median, mad = bank.reference(mad_floor=1e-6)
        stacked = np.array(list(oracle.values()))
        np.testing.assert_allclose(median["b.ln_1.weight"], np.median(stacked[:, :2], axis=0), atol=1e-12)
        np.testing.assert_allclose(mad["a.ln_1.bias"],
                                   np.maximum(np.median(np.abs(stacked[:, 2:] - np.median(stacked[:, 2:], axis=0)),
                                                        axis=0), 1e-6), atol=1e-12)


float32_exact = st.floats(-10, 10, width=32).map(float)


@given(st.lists(st.dictionaries(ids, st.lists(st.one_of(float32_exact, float32_exact, st.floats(-10, 10)),
                                              min_size=3, max_size=3), max_size=5), min_size=1, max_size=8))
def test_float32_storage_is_lossless(sequence):
    # The bank stores float32 while every value is exactly one, float64 from the first value that is not:
    # stored signatures, median and MAD equal those of the float64 values bit for bit either way.
    bank, oracle, always_exact = HistoryBank(), {}, True
    for round_signatures in sequence:
        bank.update({cid: as_signature(v) for cid, v in round_signatures.items()})
        oracle.update({cid: np.array(v) for cid, v in round_signatures.items()})
        always_exact &= all(float(np.float32(x)) == x for v in round_signatures.values() for x in v)
        if not oracle:
            continue
        assert bank._columns.dtype == (np.float32 if always_exact else np.float64)
        stacked = np.array([oracle[cid] for cid in bank.ids])
        for cid in oracle:
            np.testing.assert_array_equal(np.concatenate(list(bank[cid].values())), oracle[cid][[2, 0, 1]])
            assert bank[cid]["b.ln_1.weight"].dtype == np.float64
        median, mad = bank.reference_flat(mad_floor=0.0)
        stacked = stacked[:, [2, 0, 1]]
        expected_median = np.median(stacked, axis=0)
        np.testing.assert_array_equal(median, expected_median)
        np.testing.assert_array_equal(mad, np.median(np.abs(stacked - expected_median), axis=0))


def test_float32_storage_switches_to_float64_and_back_on_load(tmp_path):
    bank = HistoryBank()
    bank.update({0: as_signature([0.5, -0.25, 1.0]), 1: as_signature([0.125, 0.0, 2.0])})
    assert bank._columns.dtype == np.float32
    bank.update({2: as_signature([0.1, 0.0, 0.0])})            # 0.1 is not a float32: everything float64
    assert bank._columns.dtype == np.float64
    np.testing.assert_array_equal(bank[0]["b.ln_1.weight"], [0.5, -0.25])
    assert bank[2]["b.ln_1.weight"][0] == 0.1
    bank.save(tmp_path / "bank.npz")
    assert HistoryBank.load(tmp_path / "bank.npz")._columns.dtype == np.float64
    bank.update({2: as_signature([0.75, 0.0, 0.0])})           # every value a float32 again: float32 on load
    bank.save(tmp_path / "bank.npz")
    loaded = HistoryBank.load(tmp_path / "bank.npz")
    assert loaded._columns.dtype == np.float32 and loaded[2]["b.ln_1.weight"][0] == 0.75


def test_refresh_never_reads_the_spare_capacity():
    # The column array grows by doubling; its spare columns are uninitialised memory, which may hold signalling
    # NaNs: a refresh that copied them (then overwrote them) raised "invalid value encountered in cast" when
    # the storage switched from float32 to float64.
    bank = HistoryBank()
    bank.update({0: as_signature([0.5, -0.25, 1.0]), 1: as_signature([0.125, 0.0, 2.0])})
    assert bank._columns.dtype == np.float32 and bank._columns.shape[1] > 2
    bank._columns[:, 2:] = np.array([0x7FA00000], dtype=np.uint32).view(np.float32)   # signalling NaN
    keys, shapes = ["a.ln_1.bias", "b.ln_1.weight"], [(1,), (2,)]
    with np.errstate(all="raise"):                              # a float64 value: the storage switches
        refresh = bank.stage([2], np.array([[0.0, 0.1, 0.0]]), keys, shapes)
        median, _ = refresh.reference(mad_floor=0.0)           # what screen() reads, before the commit
    expected = np.median([[1.0, 0.5, -0.25], [2.0, 0.125, 0.0], [0.0, 0.1, 0.0]], axis=0)
    np.testing.assert_array_equal(median, expected)
    bank.commit(refresh)
    assert bank._columns.dtype == np.float64
    np.testing.assert_array_equal(bank.reference_flat(mad_floor=0.0)[0], expected)


def test_ids_int_and_str_are_distinct_and_ordered():
    bank = HistoryBank()
    bank.update({"1": as_signature([0, 0, 0]), 1: as_signature([1, 1, 1]), 0: as_signature([2, 2, 2])})
    assert bank.ids == (0, 1, "1") and len(bank) == 3


def test_layout_mismatch_and_bad_settings_raise():
    bank = HistoryBank()
    bank.update({1: as_signature([0, 0, 0])})
    with pytest.raises(ValueError, match="shape"):
        bank.update({2: {"b.ln_1.weight": np.zeros(3), "a.ln_1.bias": np.zeros(1)}})
    with pytest.raises(ValueError, match="keys"):
        bank.update({2: {"b.ln_1.weight": np.zeros(2)}})
    with pytest.raises(ValueError, match="ema"):
        HistoryBank(ema=1.0).update({1: as_signature([0, 0, 0])})
    with pytest.raises(TypeError, match="bool"):
        HistoryBank().update({True: as_signature([0, 0, 0])})
    with pytest.raises(ValueError, match="empty"):
        HistoryBank().reference()


def test_reservoir_bounds_memory_and_samples_uniformly():
    admitted = np.zeros(40)
    for seed in range(200):
        bank = HistoryBank(max_clients=10, random_state=seed)
        for start in range(0, 40, 5):
            bank.update({cid: as_signature([cid, 0, 0]) for cid in range(start, start + 5)})
        assert len(bank) == 10 and bank.n_seen == 40
        for cid in bank.ids:
            admitted[cid] += 1
            np.testing.assert_array_equal(bank[cid]["b.ln_1.weight"], [cid, 0])
    # Every id is kept with probability 10/40: 50 of 200 banks on average. A first-come bank would keep
    # ids 0-9 always; the reservoir must not.
    assert admitted.min() > 25 and admitted.max() < 80


def test_reservoir_declined_id_stays_out():
    bank = HistoryBank(max_clients=1, random_state=0)
    bank.update({0: as_signature([0, 0, 0])})
    bank.update({1: as_signature([1, 0, 0])})
    kept = bank.ids[0]
    other = 1 - kept
    bank.update({other: as_signature([5, 5, 5])})
    assert bank.ids == (kept,)


@given(rounds)
def test_save_load_round_trip(tmp_path_factory, sequence):
    path = tmp_path_factory.mktemp("bank") / "bank.npz"
    bank = HistoryBank(ema=0.5, max_clients=4, random_state=3)
    for round_signatures in sequence:
        bank.update({cid: as_signature(v) for cid, v in round_signatures.items()})
    bank.save(path)
    loaded = HistoryBank.load(path)
    assert loaded.ids == bank.ids and loaded.n_seen == bank.n_seen and loaded.keys == bank.keys
    for cid in bank.ids:
        np.testing.assert_array_equal(loaded[cid]["b.ln_1.weight"], bank[cid]["b.ln_1.weight"])
    follow_up = {cid: as_signature([cid if isinstance(cid, int) else 9, 1, 2]) for cid in [0, 5, "q", 11]}
    bank.update(follow_up)
    loaded.update(follow_up)
    assert loaded.ids == bank.ids


def test_load_rejects_corrupt_and_foreign_files(tmp_path):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file at all")
    with pytest.raises(ValueError, match="corrupt"):
        HistoryBank.load(garbage)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, x=np.zeros(3))
    with pytest.raises(ValueError, match="not a fedlns-core state file"):
        HistoryBank.load(foreign)
    from fedlns_core import FedLNS
    screener_file = tmp_path / "screener.npz"
    FedLNS.paper().save(screener_file)
    with pytest.raises(ValueError, match="expected 'history-bank'"):
        HistoryBank.load(screener_file)
    truncated = tmp_path / "truncated.npz"
    bank = HistoryBank()
    bank.update({1: as_signature([0, 0, 0])})
    bank.save(truncated)
    truncated.write_bytes(truncated.read_bytes()[:-40])
    with pytest.raises(ValueError):
        HistoryBank.load(truncated)


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path, monkeypatch):
    path = tmp_path / "bank.npz"
    bank = HistoryBank()
    bank.update({1: as_signature([0, 0, 0])})
    bank.save(path)
    original = path.read_bytes()

    def fail(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(np, "savez", fail)
    bank.update({2: as_signature([1, 1, 1])})
    with pytest.raises(OSError, match="disk full"):
        bank.save(path)
    assert path.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == ["bank.npz"]
