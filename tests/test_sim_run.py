"""The round loop of fedlns_sim: run files, resume after a kill, identical numbers."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.run import run  # noqa: E402
from fedlns_sim.runfiles import read_records  # noqa: E402

TIMING = ("client_time_s", "server_time_s", "eval_time_s")


def _numbers(run_dir):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_records(run_dir)]


def _config(method, **overrides):
    values = dict(data="synthetic", rounds=6, num_clients=10, activation_coverage=0.3)
    return make_config("smoke", "gpt", method=method, **{**values, **overrides})


def test_run_writes_config_and_one_line_per_round(tmp_path):
    run_dir = run(_config("fedavg"), tmp_path, progress=False)
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["config"]["method"] == "fedavg" and "synthetic" in meta["data_source"]
    assert len(meta["malicious_clients"]) == 4
    records = read_records(run_dir)
    assert [r["round"] for r in records] == list(range(7))
    assert records[-1]["perplexity"] < records[0]["perplexity"]          # it learns
    assert all(r["tp"] + r["fp"] + r["fn"] + r["tn"] == 5 for r in records[1:])
    # a finished run is not recomputed
    before = (run_dir / "rounds.jsonl").read_bytes()
    run(_config("fedavg"), tmp_path, progress=False)
    assert (run_dir / "rounds.jsonl").read_bytes() == before


@pytest.mark.parametrize("method", ["flame", "fedlns"])
def test_stopped_run_resumes_to_the_same_numbers(tmp_path, method):
    config = _config(method)
    whole = run(config, tmp_path / "whole", progress=False)
    part = run(config, tmp_path / "part", progress=False, stop_after=3)
    assert len(read_records(part)) == 4
    with open(part / "rounds.jsonl", "a") as handle:   # a line half-written when the process died
        handle.write('{"round": 4, "eval_lo')
    run(config, tmp_path / "part", progress=False)
    assert _numbers(part) == _numbers(whole)
    if method == "fedlns":
        assert any(r.get("decided") for r in read_records(whole))   # screening became active


def test_killed_process_resumes_to_the_same_numbers(tmp_path):
    """SIGKILL a real ``fedlns-sim run`` process mid-way, resume it, compare with an uninterrupted run."""
    config = _config("fedlns", rounds=8)
    whole = run(config, tmp_path / "whole", progress=False)
    command = [sys.executable, "-m", "fedlns_sim.cli", "run", "--preset", "smoke", "--family", "gpt",
               "--method", "fedlns", "--out", str(tmp_path / "killed"), "--no-progress", "--data", "synthetic",
               "--set", "rounds=8", "--set", "num_clients=10", "--set", "activation_coverage=0.3"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "killed" / config.run_name() / "state.json"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            if state.is_file() and json.loads(state.read_text())["round"] >= 2:
                break
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    stopped_at = json.loads(state.read_text())["round"]
    assert stopped_at >= 2
    if stopped_at < 8:
        assert len(read_records(state.parent)) <= stopped_at + 2
    run(config, tmp_path / "killed", progress=False)
    assert _numbers(state.parent) == _numbers(whole)
    assert len(list(Path(state.parent).glob("checkpoint-*"))) == 1


def test_run_refuses_a_folder_holding_a_different_config(tmp_path):
    config = _config("fedavg", rounds=2)
    run_dir = run(config, tmp_path, progress=False, stop_after=1)
    meta = json.loads((run_dir / "config.json").read_text())
    meta["config"]["learning_rate"] = 0.5
    (run_dir / "config.json").write_text(json.dumps(meta))
    with pytest.raises(RuntimeError, match="different config"):
        run(config, tmp_path, progress=False)


def test_a_finished_run_of_another_config_is_refused_not_returned(tmp_path):
    config = _config("fedavg", rounds=2)
    run_dir = run(config, tmp_path, progress=False)
    meta = json.loads((run_dir / "config.json").read_text())
    meta["config"]["learning_rate"] = 0.5
    (run_dir / "config.json").write_text(json.dumps(meta))
    with pytest.raises(RuntimeError, match=r"different config \(learning_rate\)"):
        run(config, tmp_path, progress=False)


def test_nearby_fractions_get_their_own_folders():
    names = {_config("fedavg", malicious_fraction=f).run_name() for f in (0.3, 0.304, 0.3041)}
    assert len(names) == 3


def test_a_run_that_fails_before_its_first_round_leaves_no_folder(tmp_path):
    config = _config("fedavg", data=str(tmp_path / "no-such-data"))
    with pytest.raises(FileNotFoundError):
        run(config, tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs" / config.run_name()).exists()


def test_run_records_its_code_and_references(tmp_path):
    meta = json.loads((run(_config("fedavg", rounds=1), tmp_path, progress=False) / "config.json").read_text())
    assert set(meta["code"]) == {"version", "commit", "dirty", "source"} and len(meta["code"]["source"]) == 16
    assert meta["unigram_perplexity"] > 1 and meta["eval_positions"] > 0


def test_oracle_averages_exactly_the_benign_clients(tmp_path):
    run_dir = run(_config("oracle"), tmp_path, progress=False)
    for record in read_records(run_dir)[1:]:
        assert sorted(record["kept"]) == sorted(set(record["sampled"]) - set(record["malicious_sampled"]))
        assert record["tp"] == len(record["malicious_sampled"]) and record["fp"] == 0


def test_fedlns_records_its_screening_diagnostics(tmp_path):
    run_dir = run(_config("fedlns", record_signatures=True), tmp_path, progress=False)
    records = read_records(run_dir)[1:]
    active = [r for r in records if r["active"]]
    assert active, "screening never became active"
    for record in active:
        sampled = {str(c) for c in record["sampled"]}
        assert set(record["delta"]) == set(record["label"]) == sampled
        assert set(record["bic"]) == {"1", "2"} and record["n_components"] in (1, 2)
        kept = {c for c, label in record["label"].items() if label == 0}
        assert kept == {str(c) for c in record["kept"]}
    # age of each client's previous bank entry: None the first time it is seen, else rounds since then
    seen = {}
    for record in records:
        for client in record["sampled"]:
            expected = record["round"] - seen[client] if client in seen else None
            assert record["previous_entry_age"][str(client)] == expected
            seen[client] = record["round"]
    stored = np.load(run_dir / "signatures" / "round-0001.npz")
    assert stored["signatures"].shape[0] == len(records[0]["sampled"])
