"""End to end: a smoke sweep through the command line produces run files, tables and plots."""

import csv
import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")
from fedlns_sim.cli import main  # noqa: E402
from fedlns_sim.config import METHOD_NAMES, METHODS  # noqa: E402


def test_smoke_sweep_then_report(tmp_path, capsys):
    runs, report = tmp_path / "runs", tmp_path / "report"
    argv = ["sweep", "--preset", "smoke", "--data", "synthetic", "--families", "gpt,bert,llama",
            "--methods", ",".join(METHODS), "--set", "rounds=2", "--out", str(runs), "--report", str(report),
            "--no-progress"]
    assert main(argv) == 0
    output = capsys.readouterr().out
    runs_per_family = len(METHODS) + 1                   # every method at 40%, and the clean run (FedAvg at 0%)
    assert f"sweep: {3 * runs_per_family} ran, 0 already finished, 0 failed" in output
    folders = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("_")]
    assert len(folders) == 3 * runs_per_family
    for folder in folders:
        assert json.loads((folder / "config.json").read_text())["config"]["rounds"] == 2
        assert len((folder / "rounds.jsonl").read_text().splitlines()) == 3
    tables = (report / "tables.md").read_text()
    for family in ("GPT / synthetic corpus", "BERT / synthetic corpus", "LLaMA / synthetic corpus"):
        assert f"Test PPL under different malicious-client fractions for {family} with IID partition" in tables
    assert "| FedAvg |" in tables and "| FedLNS |" in tables
    assert "\\begin{tabular}{lcc}" in (report / "tables.tex").read_text()   # 40% best, 40% last 10
    rows = list(csv.DictReader((report / "tables.csv").open()))
    perplexity = [row for row in rows if row["table"].startswith("Test PPL")]
    compared = [method for method in METHODS if method != "fedlns_two"]   # forced-two: the GMM ablation
    unigram = {row["row"] for row in perplexity} - {METHOD_NAMES[method] for method in compared}
    assert unigram == {"Unigram model", "Clean (FedAvg, 0% malicious)"}   # the references beside every method
    assert len(perplexity) == 3 * 2 * (len(compared) + 2)  # per family: methods, clean, unigram x {best, last 10}
    assert any(row["row"] == "Forced 2-GMM" for row in rows)
    assert all(math.isfinite(float(row["mean"])) and float(row["mean"]) > 1 for row in perplexity)
    for name in ("perplexity_vs_fraction.svg", "perplexity_per_round.svg", "detection_rates.svg"):
        assert (report / name).read_bytes().startswith(b"<?xml")
    # a second sweep finds everything finished
    assert main(argv[:-3] + ["--no-progress"]) == 0
    assert f"sweep: 0 ran, {3 * runs_per_family} already finished" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["run", "--set", "round=3"], "unknown config key 'round'"),
    (["run", "--set", "rounds=abc"], "config key 'rounds' expects int, got 'abc'"),
    (["run", "--data", "/nonexistent/folder"], "data folder '/nonexistent/folder' (from --data) does not exist"),
    (["report", "EMPTY", "--out", "REPORT"], "no finished run under"),
])
def test_command_line_errors_are_one_line_without_traceback_and_leave_no_run_folder(tmp_path, capsys, argv,
                                                                                      message):
    argv = [str(tmp_path / "empty") if a == "EMPTY" else str(tmp_path / "r") if a == "REPORT" else a for a in argv]
    if argv[0] == "run":
        argv += ["--preset", "smoke", "--out", str(tmp_path / "runs"), "--no-progress"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1 and "Traceback" not in error
    assert not (tmp_path / "runs").exists() or not any(p.name != "_cache" for p in (tmp_path / "runs").iterdir())


def test_a_missing_fedlns_data_folder_is_an_error_not_a_fallback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEDLNS_DATA", str(tmp_path / "nowhere"))
    assert main(["run", "--preset", "smoke", "--out", str(tmp_path / "runs"), "--no-progress"]) == 2
    assert "(from $FEDLNS_DATA) does not exist" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_help_shows_defaults_and_says_which_options_take_lists(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 1)" in text and "comma-separated" in text and "(default: cpu)" in text
