"""End to end: a smoke sweep through the command line produces run files, tables and plots."""

import csv
import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")
from fedlns_sim.cli import main  # noqa: E402
from fedlns_sim.methods import DISPLAY_NAMES  # noqa: E402

METHODS = ("fedavg", "norm_bounded_fedavg", "coordinate_median", "trimmed_mean", "multi_krum", "flame",
           "fedlns", "fedlns_two")


def test_smoke_sweep_then_report(tmp_path, capsys):
    runs, report = tmp_path / "runs", tmp_path / "report"
    argv = ["sweep", "--preset", "smoke", "--data", "synthetic", "--families", "gpt,bert,llama",
            "--methods", ",".join(METHODS), "--set", "rounds=2", "--out", str(runs), "--report", str(report),
            "--no-progress"]
    assert main(argv) == 0
    output = capsys.readouterr().out
    assert f"sweep: {3 * len(METHODS)} ran, 0 already finished, 0 failed" in output
    folders = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("_")]
    assert len(folders) == 3 * len(METHODS)
    for folder in folders:
        assert json.loads((folder / "config.json").read_text())["config"]["rounds"] == 2
        assert len((folder / "rounds.jsonl").read_text().splitlines()) == 3
    tables = (report / "tables.md").read_text()
    for family in ("GPT / synthetic corpus", "BERT / synthetic corpus", "LLaMA / synthetic corpus"):
        assert f"Test PPL under different malicious-client fractions for {family} with IID partition" in tables
    assert "| FedAvg |" in tables and "| FedLNS |" in tables
    assert "\\begin{tabular}{lc}" in (report / "tables.tex").read_text()
    rows = list(csv.DictReader((report / "tables.csv").open()))
    perplexity = [row for row in rows if row["table"].startswith("Test PPL")]
    compared = [method for method in METHODS if method != "fedlns_two"]   # forced-two: the GMM ablation
    assert {row["row"] for row in perplexity} == {DISPLAY_NAMES[method] for method in compared}
    assert len(perplexity) == 3 * len(compared)           # one per method and family
    assert any(row["row"] == "Forced 2-GMM" for row in rows)
    assert all(math.isfinite(float(row["mean"])) and float(row["mean"]) > 1 for row in perplexity)
    for name in ("perplexity_vs_fraction.png", "perplexity_per_round.png", "detection_rates.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a second sweep finds everything finished
    assert main(argv[:-3] + ["--no-progress"]) == 0
    assert f"sweep: 0 ran, {3 * len(METHODS)} already finished" in capsys.readouterr().out


def test_unknown_override_is_rejected_before_running(tmp_path):
    with pytest.raises(KeyError, match="unknown config key 'round'"):
        main(["run", "--preset", "smoke", "--set", "round=3", "--out", str(tmp_path)])
