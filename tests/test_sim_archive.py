"""Results that reproduce: archive finished runs, then `fedlns-sim verify` re-runs named cells number for number."""

import gzip
import json
import os
import shutil
import tarfile

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from fedlns_sim.cli import main  # noqa: E402
from fedlns_sim.report import load_runs  # noqa: E402
from fedlns_sim.runstore import read_archive, write_archive  # noqa: E402


def _sweep(runs, methods="fedavg,fedlns", seeds="100"):
    assert main(["sweep", "--preset", "smoke", "--data", "synthetic", "--families", "gpt", "--methods", methods,
                 "--seeds", seeds, "--set", "rounds=3", "--set", "num_clients=10", "--set",
                 "activation_coverage=0.3", "--out", str(runs), "--no-progress", "--no-references"]) == 0


def _rewrite(results, cell, name, edit):
    """Change one file of an archived run: ``edit`` takes its bytes and returns the new ones."""
    runs = read_archive(results / "runs.tar.xz")
    runs[cell][name] = edit(runs[cell][name])
    write_archive(results / "runs.tar.xz", runs)


def _records_edited(change):
    """An ``edit`` for :func:`_rewrite` of ``rounds.jsonl``: ``change`` alters the parsed records in place."""
    def edit(data):
        records = [json.loads(line) for line in data.splitlines()]
        change(records)
        return "".join(json.dumps(r) + "\n" for r in records).encode()
    return edit


def test_archive_then_verify_reproduces_and_catches_a_changed_number(tmp_path, capsys):
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    assert main(["archive", str(runs), str(results)]) == 0
    assert sorted(p.name for p in results.iterdir()) == ["runs.tar.xz", "verify.txt"]
    (cell,) = (results / "verify.txt").read_text().split()
    assert "-fedlns-" in cell                                   # the default cell: FedLNS, one per family
    archived = read_archive(results / "runs.tar.xz")[cell]
    assert sorted(archived) == ["config.json", "rounds.jsonl", "state.json"]
    assert archived["rounds.jsonl"] == (runs / cell / "rounds.jsonl").read_bytes()
    assert json.loads(archived["config.json"])["config"]["data"] == "synthetic"
    # the report reads the archive, named or by its results folder, like a runs folder
    assert {s["method"] for s in load_runs(results)} == {"fedavg", "fedlns"}
    assert repr(load_runs(results / "runs.tar.xz")) == repr(load_runs(results))   # repr: nan equals nan

    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1"]) == 0
    assert "verify: 1 of 1 cells reproduce" in capsys.readouterr().out

    def nudge(records):
        records[2]["eval_loss"] += 1e-9                          # one number, slightly off
    _rewrite(results, cell, "rounds.jsonl", _records_edited(nudge))
    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1"]) == 1
    output = capsys.readouterr().out
    assert "DIFFERENT: round 2: eval_loss was" in output and "verify: 0 of 1 cells reproduce" in output
    # the difference is summarised beside the machine the run was made on (recorded in its config.json)
    machine = json.loads(archived["config.json"])["machine"]
    assert machine["cpu_capability"] and machine["torch"] and "made on: " + machine["cpu"] in output
    assert "how close: evaluation loss within" in output and "screening labels differ in 0 of 3 rounds" in output
    # a relative tolerance on best and last-10 perplexity accepts it, a difference beyond it does not
    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1", "--rtol", "1e-6"]) == 0
    assert "0 of 1 cells reproduce, 1 more within rtol 1e-06" in capsys.readouterr().out

    def move_best(records):
        records[1]["eval_loss"] -= 0.01                          # now the best checkpoint moves by about 1%
    _rewrite(results, cell, "rounds.jsonl", _records_edited(move_best))
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
    assert (tmp_path / "a" / "runs.tar.xz").read_bytes() == (tmp_path / "b" / "runs.tar.xz").read_bytes()
    archived = read_archive(tmp_path / "a" / "runs.tar.xz")
    (fedavg,) = (name for name in archived if "-fedavg-" in name)
    assert json.loads(archived[fedavg]["config.json"])["config"]["data"] == ""


def test_verify_accepts_runs_made_before_a_setting_existed(tmp_path, capsys):
    """A setting added to Config later (here: pretend the archived run predates attack_noise) takes its default."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    main(["archive", str(runs), str(results)])
    (cell,) = (results / "verify.txt").read_text().split()

    def predate(data):
        meta = json.loads(data)
        del meta["config"]["attack_noise"]
        return json.dumps(meta).encode()
    _rewrite(results, cell, "config.json", predate)
    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1"]) == 0
    output = capsys.readouterr().out
    assert "or their defaults: attack_noise=" in output and "1 of 1 cells reproduce" in output


def test_archived_runs_extracted_into_a_runs_folder_are_skipped_by_a_sweep(tmp_path, capsys):
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    main(["archive", str(runs), str(results)])
    with tarfile.open(results / "runs.tar.xz") as tar:           # tar -xJf runs.tar.xz -C restored
        tar.extractall(tmp_path / "restored", filter="data")
    _sweep(tmp_path / "restored")
    assert "sweep: 0 ran, 2 already finished" in capsys.readouterr().out


def test_a_sweep_skips_a_finished_run_of_the_same_experiment_under_another_name(tmp_path, capsys):
    """Runs archived under an earlier naming scheme (the hash of every setting) are found by their configs."""
    runs = tmp_path / "runs"
    _sweep(runs)
    (fedlns,) = runs.glob("gpt-*-fedlns-*")
    fedlns.rename(runs / "gpt-iid-mal40-fedlns-act30-seed100-0123abcd")
    capsys.readouterr()
    _sweep(runs)
    assert "sweep: 0 ran, 2 already finished" in capsys.readouterr().out
    state = runs / "gpt-iid-mal40-fedlns-act30-seed100-0123abcd" / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "round": 2}))   # unfinished: made again
    _sweep(runs)
    assert "sweep: 1 ran, 1 already finished" in capsys.readouterr().out
    assert fedlns.is_dir()


def test_appending_to_an_archive_keeps_its_runs_first_and_unchanged(tmp_path):
    """A results folder grows sweep by sweep: the runs it held stay, in their order, byte for byte."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs, methods="fedlns")
    main(["archive", str(runs), str(results)])
    before = read_archive(results / "runs.tar.xz")
    shutil.rmtree(runs)                                          # the next sweep, in a runs folder of its own
    _sweep(runs, methods="fedavg", seeds="100,200")
    assert main(["archive", str(runs), str(results)]) == 0
    after = read_archive(results / "runs.tar.xz")
    assert len(before) == 1 and len(after) == 3
    assert list(after)[:1] == list(before) and all(after[name] == before[name] for name in before)
    assert sorted(s["method"] for s in load_runs(results)) == ["fedavg", "fedavg", "fedlns"]
    # archived again, from the archive itself or the runs folder, nothing changes
    grown = (results / "runs.tar.xz").read_bytes()
    assert main(["archive", str(results), str(results)]) == 0
    assert main(["archive", str(runs), str(results)]) == 0
    assert (results / "runs.tar.xz").read_bytes() == grown


def test_an_interrupted_write_leaves_the_old_archive(tmp_path, monkeypatch):
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs, methods="fedlns")
    main(["archive", str(runs), str(results)])
    before = (results / "runs.tar.xz").read_bytes()
    shutil.rmtree(runs)
    _sweep(runs, methods="fedavg")

    def killed(descriptor):                                      # the new archive written, not yet on disk
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        main(["archive", str(runs), str(results)])
    assert (results / "runs.tar.xz").read_bytes() == before
    assert sorted(p.name for p in results.iterdir()) == ["runs.tar.xz", "verify.txt"]   # no temporary file left
    assert [s["method"] for s in load_runs(results)] == ["fedlns"]


def test_results_in_the_folder_layout_convert_to_an_archive(tmp_path, capsys):
    """Earlier results folders hold runs/<run>/{config.json, rounds.jsonl.gz, state.json}: still read, and
    archived from there into runs.tar.xz with every record as it was."""
    runs, results = tmp_path / "runs", tmp_path / "old"
    _sweep(runs)
    for folder in runs.glob("gpt-*"):
        target = results / "runs" / folder.name
        target.mkdir(parents=True)
        shutil.copy(folder / "config.json", target)
        shutil.copy(folder / "state.json", target)
        (target / "rounds.jsonl.gz").write_bytes(gzip.compress((folder / "rounds.jsonl").read_bytes()))
    (cell,) = [folder.name for folder in runs.glob("*-fedlns-*")]
    (results / "verify.txt").write_text(cell + "\n")
    old = load_runs(results / "runs")
    assert main(["archive", str(results / "runs"), str(results), "--verify-cells", cell]) == 0
    with pytest.raises(ValueError, match="holds run folders beside its runs.tar.xz"):
        load_runs(results)                                       # never the archive alone while runs/ remains
    shutil.rmtree(results / "runs")
    assert repr(load_runs(results)) == repr(old)
    archived = read_archive(results / "runs.tar.xz")
    assert all(archived[name]["rounds.jsonl"] == (runs / name / "rounds.jsonl").read_bytes() for name in archived)
    assert main(["verify", str(results), "--out", str(tmp_path / "again"), "--jobs", "1"]) == 0
    assert "verify: 1 of 1 cells reproduce" in capsys.readouterr().out


def test_archive_refuses_an_archived_run_without_records(tmp_path):
    runs, results = tmp_path / "runs", tmp_path / "results"
    _sweep(runs)
    main(["archive", str(runs), str(results)])
    (fedavg,) = (name for name in read_archive(results / "runs.tar.xz") if "-fedavg-" in name)
    _rewrite(results, fedavg, "rounds.jsonl", lambda data: b"")
    with pytest.raises(ValueError, match="holds no record"):
        from fedlns_sim.archive import archive

        archive(results, tmp_path / "again")


def test_check_study_names_finds_the_archived_runs_a_command_no_longer_makes(tmp_path, capsys):
    # scripts/check_study_names.py: a study command's sweeps, run by a stand-in that only lists their runs, against
    # the runs a results folder holds; a setting the command changes since renames (only) the runs it reaches.
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
    import check_study_names

    command = ["bash", "-c", '"$FEDLNS_SIM" sweep --preset smoke --families gpt --methods fedavg,fedlns_default '
               f'--seeds 100 --fractions 0.4 --no-references --out {tmp_path / "unused"} "$@"', "study"]
    names, experiments, status = check_study_names.named_runs(command)
    assert status == 0 and len(names) == len(experiments) == 2 and not (tmp_path / "unused").exists()
    assert all(name.startswith("gpt-iid-mal40-") for name in names)
    for name in names:                                           # a results folder holding those runs
        (tmp_path / "results" / name).mkdir(parents=True)
        (tmp_path / "results" / name / "config.json").write_text("{}")
    assert check_study_names.main([str(tmp_path / "results"), "--", *command]) == 0
    assert "2 of 2 archived runs made" in capsys.readouterr().out
    assert check_study_names.main([str(tmp_path / "results"), "--", *command, "--set", "cohort_cut=tree"]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 archived runs made" in out                   # FedAvg's run does not read the cut
    assert "not made: gpt-iid-mal40-fedlns_default-" in out
    # a run of the command's under another name (an earlier naming scheme's) counts by its stored config
    _sweep(tmp_path / "runs", methods="fedavg")
    (run,) = (tmp_path / "runs").glob("gpt-*")
    run.rename(tmp_path / "runs" / "gpt-iid-mal40-fedavg-act30-seed100-0123abcd")
    study = ["bash", "-c", '"$FEDLNS_SIM" sweep --preset smoke --data synthetic --families gpt --methods fedavg '
             "--seeds 100 --set rounds=3 --set num_clients=10 --set activation_coverage=0.3 --no-references "
             f"--out {tmp_path / 'unused'} \"$@\"", "study"]
    assert check_study_names.main([str(tmp_path / "runs"), "--", *study]) == 0
    assert check_study_names.main([str(tmp_path / "runs"), "--", *study, "--seeds", "200"]) == 1
    assert check_study_names.main([str(tmp_path / "results")]) == 2


def test_verify_reads_a_reason_that_names_the_lora_signature_as_the_one_recorded_before():
    """LoRA-signature runs archived before the reasons named the signature say "normalization change": the same
    decision for the same reason; any other difference, a number in the reason included, still counts."""
    from fedlns_sim.archive import first_difference

    def record(reason):
        return [{"round": 0}, {"round": 1, "rejected_reasons": {"7": reason}, "perplexity": 10.0}]

    old = record("screened: loud normalization change (delta 6.53 above 1.1: 6 robust widths)")
    assert first_difference(old, record("screened: loud LoRA change (delta 6.53 above 1.1: 6 robust widths)")) is None
    assert first_difference(old, record("screened: loud LoRA and normalization change (delta 6.53 above 1.1: 6 "
                                        "robust widths)")) is None
    assert "rejected_reasons" in first_difference(old, record("screened: loud LoRA change (delta 6.54 above 1.1: 6 "
                                                              "robust widths)"))
