"""Reports of fedlns_sim are made from run files only: best checkpoint per seed, mean and sample std."""

import json
import math

import pytest

pytest.importorskip("torch")
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.report import fraction_tables, load_runs, mean_std, to_latex, to_markdown, write_report  # noqa: E402


def _fake_run(root, method, seed, losses, entropies):
    """A run folder written by hand: round 0 plus one record per trained round."""
    config = make_config("smoke", "gpt", method=method, seed=seed, rounds=len(losses) - 1)
    folder = root / config.run_name()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"config": config.to_dict(), "data_source": "hand-made"}))
    lines = []
    for t, (loss, entropy) in enumerate(zip(losses, entropies)):
        record = {"round": t, "eval_loss": loss, "perplexity": math.exp(loss), "entropy": entropy}
        if t:
            record.update(decided=True, selects_clients=method != "fedavg", tp=1, fp=0, fn=1, tn=3,
                          client_time_s=1.0, server_time_s=0.1, eval_time_s=0.2)
        lines.append(json.dumps(record))
    (folder / "rounds.jsonl").write_text("\n".join(lines) + "\n")


def test_best_checkpoint_per_seed_then_mean_and_sample_std(tmp_path):
    # seed 100: best at round 2 (loss 3.0, entropy 5.0); seed 200: best at round 1 (loss 4.0, entropy 6.0)
    _fake_run(tmp_path, "fedavg", 100, [9.0, 5.0, 3.0, 3.5], [9.0, 7.0, 5.0, 1.0])
    _fake_run(tmp_path, "fedavg", 200, [9.0, 4.0, 4.5, 4.2], [9.0, 6.0, 2.0, 2.0])
    _fake_run(tmp_path, "fedlns", 100, [9.0, 2.0, 2.5, 2.2], [9.0, 3.0, 3.0, 3.0])
    summaries = load_runs(tmp_path)
    assert sorted((s["method"], s["seed"], s["best_round"]) for s in summaries) == [
        ("fedavg", 100, 2), ("fedavg", 200, 1), ("fedlns", 100, 1)]
    tables = {t["metric"]: t for t in fraction_tables(summaries)}
    mean, std, n = tables["eval_loss"]["cells"][("fedavg", 0.4)]
    assert (mean, std, n) == (3.5, pytest.approx(math.sqrt(0.5)), 2)
    mean, std, _ = tables["entropy"]["cells"][("fedavg", 0.4)]
    assert mean == 5.5                                   # entropy from the same checkpoint, not its own minimum
    ppl_mean, _, _ = tables["perplexity"]["cells"][("fedavg", 0.4)]
    assert ppl_mean == pytest.approx((math.exp(3.0) + math.exp(4.0)) / 2)
    markdown = to_markdown(tables["eval_loss"])
    assert "| FedAvg | 3.50 ± 0.71 |" in markdown and "| FedLNS | **2.00** |" in markdown
    assert "\\textbf{2.00}" in to_latex(tables["eval_loss"])


def test_unfinished_runs_are_left_out(tmp_path):
    _fake_run(tmp_path, "fedavg", 100, [9.0, 5.0, 3.0], [9.0, 7.0, 5.0])
    _fake_run(tmp_path, "fedlns", 100, [9.0, 2.0, 2.5], [9.0, 3.0, 3.0])
    folder = next(p for p in tmp_path.iterdir() if "fedlns" in p.name)
    lines = (folder / "rounds.jsonl").read_text().splitlines()
    (folder / "rounds.jsonl").write_text("\n".join(lines[:-1]) + "\n")      # killed before its last round
    assert [s["method"] for s in load_runs(tmp_path)] == ["fedavg"]
    assert sorted(s["method"] for s in load_runs(tmp_path, finished_only=False)) == ["fedavg", "fedlns"]


def test_mean_std_is_the_sample_standard_deviation():
    assert mean_std([2.0, 4.0]) == (3.0, pytest.approx(math.sqrt(2.0)))
    assert math.isnan(mean_std([2.0])[1])


def test_write_report_from_files(tmp_path):
    _fake_run(tmp_path / "runs", "fedavg", 100, [9.0, 5.0, 3.0], [9.0, 7.0, 5.0])
    _fake_run(tmp_path / "runs", "fedlns", 100, [9.0, 2.0, 2.5], [9.0, 3.0, 3.0])
    result = write_report(tmp_path / "runs", tmp_path / "report")
    names = sorted(p.name for p in (tmp_path / "report").iterdir())
    assert names == ["detection_rates.png", "perplexity_per_round.png", "perplexity_vs_fraction.png", "runs.csv",
                     "tables.csv", "tables.md", "tables.tex"]
    assert all(p.stat().st_size > 1000 for p in result["plots"])
    with pytest.raises(FileNotFoundError, match="no finished run"):
        write_report(tmp_path / "empty", tmp_path / "r2")
