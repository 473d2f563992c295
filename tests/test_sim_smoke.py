"""End to end: a smoke sweep through the command line produces run files, tables and plots."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")
from fedlns_sim.cli import main  # noqa: E402


def test_smoke_sweep_then_report(tmp_path, capsys):
    runs, report = tmp_path / "runs", tmp_path / "report"
    argv = ["sweep", "--preset", "smoke", "--data", "synthetic", "--families", "gpt,bert,llama",
            "--methods", "fedavg,fedlns", "--set", "rounds=2", "--out", str(runs), "--report", str(report),
            "--no-progress"]
    assert main(argv) == 0
    output = capsys.readouterr().out
    assert "sweep: 6 ran, 0 already finished, 0 failed" in output
    folders = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("_")]
    assert len(folders) == 6
    for folder in folders:
        assert json.loads((folder / "config.json").read_text())["config"]["rounds"] == 2
        assert len((folder / "rounds.jsonl").read_text().splitlines()) == 3
    tables = (report / "tables.md").read_text()
    for family in ("GPT / synthetic corpus", "BERT / synthetic corpus", "LLaMA / synthetic corpus"):
        assert f"Test PPL under different malicious-client fractions for {family} with IID partition" in tables
    assert "| FedAvg |" in tables and "| FedLNS |" in tables
    assert "\\begin{tabular}{lc}" in (report / "tables.tex").read_text()
    assert (report / "tables.csv").read_text().count("\n") == 1 + 6 * 4
    for name in ("perplexity_vs_fraction.png", "perplexity_per_round.png", "detection_rates.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a second sweep finds everything finished
    assert main(argv[:-3] + ["--no-progress"]) == 0
    assert "sweep: 0 ran, 6 already finished" in capsys.readouterr().out


def test_unknown_override_is_rejected_before_running(tmp_path):
    with pytest.raises(KeyError, match="unknown config key 'round'"):
        main(["run", "--preset", "smoke", "--set", "round=3", "--out", str(tmp_path)])
