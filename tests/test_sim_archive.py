"""Results that reproduce: archive finished runs, then `fedlns-sim verify` re-runs named cells number for number."""

import gzip
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from fedlns_sim.cli import main  # noqa: E402
from fedlns_sim.report import load_runs  # noqa: E402


def _sweep(runs):
    assert main(["sweep", "--preset", "smoke", "--data", "synthetic", "--families", "gpt", "--methods",
                 "fedavg,fedlns", "--set", "rounds=3", "--set", "num_clients=10", "--set", "activation_coverage=0.3",
                 "--out", str(runs), "--no-progress", "--no-references"]) == 0


def test_archive_then_verify_reproduces_and_catches_a_changed_number(tmp_path, capsys):
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    assert main(["archive", str(runs), str(results)]) == 0
    (cell,) = (results / "verify.txt").read_text().split()
    assert "-fedlns-" in cell                                   # the default cell: FedLNS, one per family
    archived = results / "runs" / cell
    assert sorted(p.name for p in archived.iterdir()) == ["config.json", "rounds.jsonl.gz", "state.json"]
    assert json.loads((archived / "config.json").read_text())["config"]["data"] == "synthetic"
    # the report reads archived runs like run folders
    assert {s["method"] for s in load_runs(results / "runs")} == {"fedavg", "fedlns"}

    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1"]) == 0
    assert "verify: 1 of 1 cells reproduce" in capsys.readouterr().out

    records = [json.loads(line) for line in gzip.decompress((archived / "rounds.jsonl.gz").read_bytes()).splitlines()]
    records[2]["eval_loss"] += 1e-9                              # one number, slightly off
    (archived / "rounds.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1"]) == 1
    output = capsys.readouterr().out
    assert "DIFFERENT: round 2: eval_loss was" in output and "verify: 0 of 1 cells reproduce" in output
    # the difference is summarised beside the machine the run was made on (recorded in its config.json)
    machine = json.loads((archived / "config.json").read_text())["machine"]
    assert machine["cpu_capability"] and machine["torch"] and "made on: " + machine["cpu"] in output
    assert "how close: evaluation loss within" in output and "screening labels differ in 0 of 3 rounds" in output
    # a relative tolerance on best and last-10 perplexity accepts it, a difference beyond it does not
    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1", "--rtol", "1e-6"]) == 0
    assert "0 of 1 cells reproduce, 1 more within rtol 1e-06" in capsys.readouterr().out
    records[1]["eval_loss"] -= 0.01                              # now the best checkpoint moves by about 1%
    (archived / "rounds.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1", "--rtol", "1e-3"]) == 1
    assert "0 more within rtol 0.001" in capsys.readouterr().out


def test_archive_is_byte_stable_and_drops_machine_paths(tmp_path):
    runs = tmp_path / "runs"
    _sweep(runs)
    config_path = next(runs.glob("*fedavg*/config.json"))
    meta = json.loads(config_path.read_text())
    meta["config"]["data"] = "/home/someone/data"               # as a run on real data would have it
    config_path.write_text(json.dumps(meta))
    main(["archive", str(runs), str(tmp_path / "a")])
    main(["archive", str(runs), str(tmp_path / "b")])
    for path in (tmp_path / "a" / "runs").rglob("*.*"):
        assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes()
    archived = json.loads(next((tmp_path / "a" / "runs").glob("*fedavg*/config.json")).read_text())
    assert archived["config"]["data"] == ""


def test_verify_accepts_runs_made_before_a_setting_existed(tmp_path, capsys):
    """A setting added to Config later (here: pretend the archived run predates attack_noise) takes its default."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    main(["archive", str(runs), str(results)])
    (cell,) = (results / "verify.txt").read_text().split()
    path = results / "runs" / cell / "config.json"
    meta = json.loads(path.read_text())
    del meta["config"]["attack_noise"]
    path.write_text(json.dumps(meta))
    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1"]) == 0
    output = capsys.readouterr().out
    assert "at their defaults: attack_noise" in output and "1 of 1 cells reproduce" in output


def test_archived_runs_copied_into_a_runs_folder_are_skipped_by_a_sweep(tmp_path, capsys):
    import shutil

    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    main(["archive", str(runs), str(results)])
    shutil.copytree(results / "runs", tmp_path / "restored")
    _sweep(tmp_path / "restored")
    assert "sweep: 0 ran, 2 already finished" in capsys.readouterr().out


def test_archiving_archived_runs_keeps_them_even_through_hard_links(tmp_path):
    """Re-archiving (a results folder growing seed by seed) must not touch its source: here the runs folder is a
    hard-linked copy of the destination's runs (cp -al), so a file written in place would empty both."""
    import os

    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    main(["archive", str(runs), str(results)])
    before = {p.relative_to(results): p.read_bytes() for p in (results / "runs").rglob("*.*")}
    linked = tmp_path / "linked"
    for path in (results / "runs").rglob("*.*"):
        (linked / path.parent.name).mkdir(parents=True, exist_ok=True)
        os.link(path, linked / path.parent.name / path.name)
    assert main(["archive", str(linked), str(results)]) == 0
    assert main(["archive", str(results / "runs"), str(results)]) == 0      # a folder onto itself
    after = {p.relative_to(results): p.read_bytes() for p in (results / "runs").rglob("*.*")}
    assert after == before
    assert all(len(load_runs(folder)) == 2 for folder in (linked, results / "runs"))
    assert all(s["completed"] == 3 for s in load_runs(linked))


def test_archive_refuses_an_archived_run_without_records(tmp_path):
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    main(["archive", str(runs), str(results)])
    emptied = next((results / "runs").glob("*fedavg*/rounds.jsonl.gz"))
    emptied.write_bytes(gzip.compress(b""))
    with pytest.raises(ValueError, match="holds no record"):
        from fedlns_sim.archive import archive

        archive(results / "runs", tmp_path / "again")
