"""Reports of fedlns_sim are made from run files only: best checkpoint per seed, mean and sample std."""

import importlib
import json
import math
import shutil
import types
from pathlib import Path

import numpy as np

import pytest

pytest.importorskip("torch")
from fedlns_sim import runfiles  # noqa: E402
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.report import (MixedCodeError, clean_cost_rows, fraction_tables, load_runs,  # noqa: E402
                               machine_text, paired_rows, recovery_rows, to_latex, to_markdown, write_report)
from fedlns_sim.report.stats import mean_std  # noqa: E402


def _fake_run(root, method, seed, losses, entropies, fraction=0.4, code="abc", unigram=None, extra=None,
              attack="target_corruption", machine=None):
    """A run folder written by hand: round 0 plus one record per trained round."""
    config = make_config("smoke", "gpt", method=method, seed=seed, rounds=len(losses) - 1,
                         malicious_fraction=fraction, attack=attack)
    folder = root / config.run_name()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"config": config.to_dict(), "data_source": "hand-made",
                                                    "code": {"source": code, "commit": "0" * 40},
                                                    "unigram_perplexity": unigram, "machine": machine}))
    lines = []
    for t, (loss, entropy) in enumerate(zip(losses, entropies)):
        record = {"round": t, "eval_loss": loss, "perplexity": math.exp(loss), "entropy": entropy}
        if t:
            record.update(decided=True, selects_clients=method != "fedavg", tp=1, fp=0, fn=1, tn=3,
                          client_time_s=1.0, server_time_s=0.1, eval_time_s=0.2, **(extra or {}).get(t, {}))
        lines.append(json.dumps(record))
    (folder / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_best_checkpoint_per_seed_then_mean_and_sample_std(tmp_path):
    # seed 100: best at round 2 (loss 3.0, entropy 5.0); seed 200: best at round 1 (loss 4.0, entropy 6.0)
    _fake_run(tmp_path, "fedavg", 100, [9.0, 5.0, 3.0, 3.5], [9.0, 7.0, 5.0, 1.0])
    _fake_run(tmp_path, "fedavg", 200, [9.0, 4.0, 4.5, 4.2], [9.0, 6.0, 2.0, 2.0])
    _fake_run(tmp_path, "fedlns", 100, [9.0, 2.0, 2.5, 2.2], [9.0, 3.0, 3.0, 3.0])
    summaries = load_runs(tmp_path)
    assert sorted((s["method"], s["seed"], s["best_round"]) for s in summaries) == [
        ("fedavg", 100, 2), ("fedavg", 200, 1), ("fedlns", 100, 1)]
    tables = {t["metric"]: t for t in fraction_tables(summaries)}
    mean, std, n = tables["eval_loss"]["cells"][("fedavg", (0.4, "best"))]
    assert (mean, std, n) == (3.5, pytest.approx(math.sqrt(0.5)), 2)
    mean, std, _ = tables["entropy"]["cells"][("fedavg", (0.4, "best"))]
    assert mean == 5.5                                   # entropy from the same checkpoint, not its own minimum
    ppl_mean, _, _ = tables["perplexity"]["cells"][("fedavg", (0.4, "best"))]
    assert ppl_mean == pytest.approx((math.exp(3.0) + math.exp(4.0)) / 2)
    # beside it, the last ten rounds (all three trained rounds here): exp of the mean loss, per seed
    last, _, _ = tables["perplexity"]["cells"][("fedavg", (0.4, "last10"))]
    assert last == pytest.approx((math.exp(np.mean([5.0, 3.0, 3.5])) + math.exp(np.mean([4.0, 4.5, 4.2]))) / 2)
    markdown = to_markdown(tables["eval_loss"])
    assert "| 40% best | 40% last 10 |" in markdown
    assert "| FedAvg | 3.50 ± 0.71 | 4.03 ± 0.28 |" in markdown
    assert "| FedLNS | **2.00** (n=1) | **2.23** (n=1) |" in markdown
    assert markdown.endswith("\n\nSeeds: 100, 200.\n")   # FedLNS ran one of the two seeds: its cells say so
    assert "\\textbf{2.00}" in to_latex(tables["eval_loss"])


def test_unfinished_runs_are_left_out(tmp_path):
    _fake_run(tmp_path, "fedavg", 100, [9.0, 5.0, 3.0], [9.0, 7.0, 5.0])
    _fake_run(tmp_path, "fedlns", 100, [9.0, 2.0, 2.5], [9.0, 3.0, 3.0])
    folder = next(p for p in tmp_path.iterdir() if "fedlns" in p.name)
    lines = (folder / "rounds.jsonl").read_text().splitlines()
    (folder / "rounds.jsonl").write_text("\n".join(lines[:-1]) + "\n")      # killed before its last round
    assert [s["method"] for s in load_runs(tmp_path)] == ["fedavg"]
    assert sorted(s["method"] for s in load_runs(tmp_path, finished_only=False)) == ["fedavg", "fedlns"]
    emptied = _fake_run(tmp_path, "flame", 100, [9.0, 2.0, 2.5], [9.0, 3.0, 3.0])
    (emptied / "rounds.jsonl").write_text("")                              # a damaged run: no record at all
    result = write_report(tmp_path, tmp_path / "report", plots=False)      # named in the report, not dropped
    assert result["left_out"] == sorted([folder.name, emptied.name])
    text = (tmp_path / "report" / "tables.md").read_text()
    assert "(1 finished runs; 2 left out, unfinished or without records)" in text


def test_mean_std_is_the_sample_standard_deviation():
    assert mean_std([2.0, 4.0]) == (3.0, pytest.approx(math.sqrt(2.0)))
    assert math.isnan(mean_std([2.0])[1])


def test_write_report_from_files(tmp_path):
    _fake_run(tmp_path / "runs", "fedavg", 100, [9.0, 5.0, 3.0], [9.0, 7.0, 5.0])
    _fake_run(tmp_path / "runs", "fedlns", 100, [9.0, 2.0, 2.5], [9.0, 3.0, 3.0])
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "detection_rates.png").write_bytes(b"an earlier version's plot")
    result = write_report(tmp_path / "runs", tmp_path / "report")
    names = sorted(p.name for p in (tmp_path / "report").iterdir())
    assert names == ["detection_rates.svg", "perplexity_per_round.svg", "perplexity_vs_fraction.svg", "runs.csv",
                     "tables.csv", "tables.md", "tables.tex"]    # no recovery plot; the stale PNG removed
    assert all(p.stat().st_size > 1000 and p.read_bytes().startswith(b"<?xml") for p in result["plots"])
    # written again, the same bytes: git stores a rebuilt figure's changes, not a new image
    before = {p: p.read_bytes() for p in result["plots"]}
    write_report(tmp_path / "runs", tmp_path / "report")
    assert {p: p.read_bytes() for p in result["plots"]} == before
    with pytest.raises(FileNotFoundError, match="no finished run"):
        write_report(tmp_path / "empty", tmp_path / "r2")


def test_report_from_an_archive_equals_the_report_from_its_runs_folder(tmp_path):
    from fedlns_sim.archive import archive

    for method, losses in (("fedavg", [9.0, 5.0, 3.0]), ("fedlns", [9.0, 2.0, 2.5]), ("oracle", [9.0, 2.0, 1.5])):
        for seed in (100, 200):
            _fake_run(tmp_path / "runs", method, seed, losses, [9.0, 7.0, 5.0], unigram=40.0)
    archive(tmp_path / "runs", tmp_path / "results")
    write_report(tmp_path / "runs", tmp_path / "from-folder")
    expected = {path.name: path.read_bytes() for path in (tmp_path / "from-folder").iterdir()}
    assert "recovery.svg" in expected and "tables.md" in expected
    for source in ("results", "results/runs.tar.xz"):    # a results folder, or its archive named
        out = tmp_path / f"from-{source.replace('/', '-')}"
        write_report(tmp_path / source, out)
        assert {path.name: path.read_bytes() for path in out.iterdir()} == expected    # tables, CSV, plots


def test_references_paired_differences_and_recovery(tmp_path):
    """Clean (FedAvg at 0%), oracle and unigram rows; FedLNS against the strongest baseline paired by seed; the
    recovery (FedAvg - FedLNS) / (FedAvg - oracle), all computed by hand here."""
    flat = [9.0, 6.0, 6.0]
    for seed, (attacked, median, fedlns, oracle, clean) in {100: (5.0, 4.5, 4.0, 3.8, 3.7),
                                                            200: (5.2, 4.4, 4.1, 3.9, 3.6),
                                                            300: (5.1, 4.6, 4.3, 3.7, 3.8)}.items():
        for method, loss in (("fedavg", attacked), ("coordinate_median", median), ("fedlns", fedlns),
                             ("oracle", oracle), ("trimmed_mean", attacked + 0.5)):
            _fake_run(tmp_path, method, seed, [9.0, loss, loss + 1.0], flat, unigram=400.0)
        _fake_run(tmp_path, "fedavg", seed, [9.0, clean, clean + 1.0], flat, fraction=0.0, unigram=400.0)
    summaries = load_runs(tmp_path)
    table = next(t for t in fraction_tables(summaries) if t["metric"] == "eval_loss")
    assert table["rows"][-2:] == ["oracle", "clean"]
    assert table["cells"][("clean", (0.4, "best"))][0] == pytest.approx(np.mean([3.7, 3.6, 3.8]))
    markdown = to_markdown(next(t for t in fraction_tables(summaries) if t["metric"] == "perplexity"))
    assert "| *Unigram model* | 400.00 ± 0.00 | 400.00 ± 0.00 |\n" in markdown   # no 0% column: Clean is a row
    assert "| *Oracle (benign only)* |" in markdown           # references in italics, never in bold
    strongest = next(r for r in paired_rows(summaries) if r["fraction"] == 0.4 and r["against"] != "FedAvg")
    assert strongest["baseline"] == "coordinate_median" and strongest["seeds"] == [100, 200, 300]
    differences = [math.exp(4.0) - math.exp(4.5), math.exp(4.1) - math.exp(4.4), math.exp(4.3) - math.exp(4.6)]
    assert strongest["best"]["mean"] == pytest.approx(np.mean(differences)) and strongest["best_wins"] == 3
    assert strongest["best"]["low"] < strongest["best"]["mean"] < strongest["best"]["high"] < 0
    row = next(r for r in recovery_rows(summaries) if r["method"] == "fedlns")
    per_seed = [(math.exp(a) - math.exp(f)) / (math.exp(a) - math.exp(o))
                for a, f, o in ((5.0, 4.0, 3.8), (5.2, 4.1, 3.9), (5.1, 4.3, 3.7))]
    assert row["best"]["mean"] == pytest.approx(np.mean(per_seed))
    assert "trimmed_mean" in {r["method"] for r in recovery_rows(summaries)}
    result = write_report(tmp_path, tmp_path / "report")
    assert (tmp_path / "report" / "recovery.svg").is_file() and "## Recovery" in result["tables"].read_text()

    def both(losses):   # best checkpoint (round 1) / last 10 (rounds 1 and 2: exp of their mean loss)
        return (f"{np.mean([math.exp(x) for x in losses]):.0f} / "
                f"{np.mean([math.exp(x + 0.5) for x in losses]):.0f}")

    glance = next(line for line in result["tables"].read_text().splitlines()
                  if line.startswith("| GPT") and "40%" in line)
    assert glance == (f"| GPT / WikiText | IID | 40% | 3 | {both([5.0, 5.2, 5.1])} | Median {both([4.5, 4.4, 4.6])} | "
                      f"{both([4.0, 4.1, 4.3])} | 50.0% / 0.0% | {_interval_text(row['best'])} | "
                      f"{both([3.8, 3.9, 3.7])} | {both([3.7, 3.6, 3.8])} | 400 |")


def _interval_text(result):
    return f"{result['mean']:+.2f} [{result['low']:+.2f}, {result['high']:+.2f}]"


def test_screening_diagnostics_count_wrong_cluster_rounds_and_auc(tmp_path):
    # round 1: attackers 1, 2 have the larger deltas and are rejected; round 2: the mixture kept them (wrong side)
    extra = {1: {"malicious_sampled": [1, 2], "delta": {"1": 9.0, "2": 8.0, "3": 1.0, "4": 2.0},
                 "label": {"1": 1, "2": 1, "3": 0, "4": 0}, "n_components": 2},
             2: {"malicious_sampled": [1, 2], "delta": {"1": 3.0, "2": 1.0, "3": 2.0, "4": 9.0},
                 "label": {"1": 0, "2": 0, "3": 0, "4": 1}, "n_components": 2}}
    _fake_run(tmp_path, "fedlns", 100, [9.0, 2.0, 2.5], [9.0, 3.0, 3.0], extra=extra)
    (summary,) = load_runs(tmp_path)
    assert summary["active_rounds"] == 2 and summary["wrong_cluster_rounds"] == 1
    assert summary["singleton_rounds"] == 1                 # round 2 rejected one client alone
    assert summary["auc"] == pytest.approx((1.0 + 0.25) / 2)  # round 2: of the 4 pairs only 3 > 2 is ordered


def test_report_refuses_runs_of_different_code(tmp_path):
    _fake_run(tmp_path, "fedavg", 100, [9.0, 5.0, 3.0], [9.0, 7.0, 5.0], code="old")
    _fake_run(tmp_path, "fedlns", 100, [9.0, 2.0, 2.5], [9.0, 3.0, 3.0], code="new")
    with pytest.raises(MixedCodeError, match="2 versions of the code"):
        write_report(tmp_path, tmp_path / "report")
    result = write_report(tmp_path, tmp_path / "report", plots=False, allow_mixed_code=True)
    assert "several versions" in result["tables"].read_text()


def test_the_code_a_run_records_leaves_the_report_out(tmp_path, monkeypatch):
    """Editing the report package or the command line does not make earlier runs other code; the round loop does."""
    packages = {}
    for name in ("fedlns_core", "fedlns_torch", "fedlns_sim"):
        shutil.copytree(Path(importlib.import_module(name).__file__).parent, tmp_path / name)
        packages[name] = types.SimpleNamespace(__file__=str(tmp_path / name / "__init__.py"), __version__="0")
    monkeypatch.setattr(importlib, "import_module", packages.__getitem__)

    def source_after(edit):
        with open(tmp_path / edit, "a") as handle:
            handle.write("# edited\n")
        return runfiles.code_identity()["source"]

    made_by = runfiles.code_identity()["source"]
    assert source_after("fedlns_sim/report/plots.py") == source_after("fedlns_sim/cli.py") == made_by
    assert source_after("fedlns_sim/run.py") != made_by


def test_report_names_the_machines_the_runs_were_made_on(tmp_path):
    # runs continued on another kind of processor stay one report, but say so: their kernels round differently
    avx512 = {"cpu": "EPYC", "cpu_capability": "AVX512", "torch": "2.13.0"}
    avx2 = dict(avx512, cpu_capability="AVX2")
    _fake_run(tmp_path, "fedavg", 100, [9.0, 5.0, 3.0], [9.0, 7.0, 5.0], machine=avx512)
    _fake_run(tmp_path, "fedavg", 200, [9.0, 5.0, 3.0], [9.0, 7.0, 5.0], machine=avx512)
    _fake_run(tmp_path, "fedlns", 100, [9.0, 2.0, 2.5], [9.0, 3.0, 3.0], machine=avx2)
    assert [s["machine"] for s in sorted(load_runs(tmp_path), key=lambda s: (s["method"], s["seed"]))] == [
        "EPYC (AVX512 kernels, torch 2.13.0)", "EPYC (AVX512 kernels, torch 2.13.0)",
        "EPYC (AVX2 kernels, torch 2.13.0)"]
    tables = write_report(tmp_path, tmp_path / "report", plots=False)["tables"].read_text()
    assert "on EPYC (AVX512 kernels, torch 2.13.0) (2 runs); EPYC (AVX2 kernels, torch 2.13.0) (1 run)" in tables
    assert "machine" in (tmp_path / "report" / "runs.csv").read_text().splitlines()[0].split(",")
    for folder in tmp_path.glob("gpt-*fedlns*"):
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(dict(config, machine=avx512)))
    tables = write_report(tmp_path, tmp_path / "one_machine", plots=False)["tables"].read_text()
    assert "on EPYC (AVX512 kernels, torch 2.13.0). " in tables


def test_machine_records_the_extensions_that_tell_two_avx512_processors_apart():
    # same cpu model name and AVX-512 kernels, with and without AVX512-FP16: measured to differ at round 0
    from fedlns_sim.run import KERNEL_FLAGS, machine_identity

    flags = machine_identity("cpu")["cpu_flags"]
    assert isinstance(flags, list) and set(flags) <= set(KERNEL_FLAGS)
    newer = {"cpu": "Xeon", "cpu_capability": "AVX512", "cpu_flags": ["avx512f", "avx512_fp16"], "torch": "2.13.0"}
    older = dict(newer, cpu_flags=["avx512f"])
    assert machine_text(newer) == "Xeon (AVX512 kernels, avx512f avx512_fp16, torch 2.13.0)"
    assert machine_text(newer) != machine_text(older)


def test_attack_matrix_pairs_each_attack_with_its_own_fedavg_and_the_shared_oracle(tmp_path):
    from fedlns_sim.report import attack_matrix

    flat = [9.0, 6.0, 6.0]
    for seed in (100, 200):
        _fake_run(tmp_path, "oracle", seed, [9.0, 3.0, 4.0], flat)
        _fake_run(tmp_path, "fedavg", seed, [9.0, 2.5, 3.5], flat, fraction=0.0)   # clean
        for attack, (fedavg, fedlns) in {"target_corruption": (5.0, 3.5), "alie": (4.0, 4.0),
                                         "gaussian": (2.9, 3.2)}.items():   # gaussian: no harm, no recovery
            for method, loss in (("fedavg", fedavg), ("fedlns", fedlns)):
                _fake_run(tmp_path, method, seed, [9.0, loss, loss + 1.0], flat, attack=attack)
    cells = {(c["attack"], c["method"]): c for c in attack_matrix(load_runs(tmp_path))}
    assert cells[("target_corruption", "fedlns")]["recovery"]["mean"] == pytest.approx(
        (math.exp(5.0) - math.exp(3.5)) / (math.exp(5.0) - math.exp(3.0)))
    assert cells[("alie", "fedlns")]["recovery"]["mean"] == pytest.approx(0.0)     # no better than FedAvg
    assert cells[("target_corruption", "fedlns")]["above_oracle"]["mean"] == pytest.approx(math.exp(0.5) - 1)
    assert cells[("alie", "fedavg")]["above_oracle"]["mean"] == pytest.approx(math.exp(1.0) - 1)
    result = write_report(tmp_path, tmp_path / "report")
    text = result["tables"].read_text()
    assert "## Robustness matrix" in text
    assert "GPT / WikiText, IID, 40% malicious: perplexity, mean of the last 10 rounds" in text
    assert math.isnan(cells[("gaussian", "fedlns")]["recovery"]["mean"])
    matrix_text = text.split("## Robustness matrix")[1].split("## Detection")[0]
    assert "nan" not in matrix_text
    assert "| FedLNS | 33 ± 0 (rec 0.90) 50.0%/0.0% | 25 ± 0 50.0%/0.0% | 55 ± 0 (rec 0.00) 50.0%/0.0% |" in matrix_text
    # the references beside the matrix, once per table: the oracle of that fraction, FedAvg at 0%
    assert matrix_text.count("References, whatever the attack: *Oracle* ") == 2
    assert "*Oracle* 20 ± 0 (2 seeds); *Clean* 12 ± 0 (2 seeds)." in matrix_text      # exp(3.0), exp(2.5)
    assert (tmp_path / "report" / "attack_matrix.svg").is_file()
    # the main tables keep the paper's attack only
    assert {s["attack"] for s in result["summaries"]} == {"target_corruption", "alie", "gaussian"}
    table = next(t for t in result["table_objects"] if t.get("metric") == "eval_loss" and "family" in t)
    assert table["cells"][("fedlns", (0.4, "best"))][0] == pytest.approx(3.5)


def test_fraction_sweep_tables_use_the_seeds_run_at_every_fraction(tmp_path):
    """The paper's appendix layout: columns 0%..40% x {best, last 10}, every column over the same seeds. Seed 400
    ran only the 40% comparison, so it is left out of the sweep's table and named in its note; a cell with fewer
    runs than the table's seeds says so."""
    flat = [9.0, 6.0, 6.0]
    loss = {"fedavg": 4.0, "fedlns": 3.0, "flame": 3.5, "multi_krum": 3.8}
    for seed in (100, 200, 300, 400):
        _fake_run(tmp_path, "fedavg", seed, [9.0, 2.0 + seed / 1000, 3.0], flat, fraction=0.0)
        for method in ("fedavg", "fedlns", "flame", "multi_krum"):
            _fake_run(tmp_path, method, seed, [9.0, loss[method] + seed / 1000, 5.0], flat)
    for seed in (100, 200, 300):
        for fraction in (0.0, 0.1, 0.2, 0.3):
            for method in ("fedavg", "fedlns", "flame"):
                if (method == "fedavg" and fraction == 0.0) or (method, fraction, seed) == ("flame", 0.2, 300):
                    continue
                _fake_run(tmp_path, method, seed, [9.0, loss[method] + fraction + seed / 1000, 5.0], flat,
                          fraction=fraction)
    summaries = load_runs(tmp_path)
    table = next(t for t in fraction_tables(summaries) if t["metric"] == "eval_loss")
    assert table["columns"] == [f"{f}% {k}" for f in (0, 10, 20, 30, 40) for k in ("best", "last 10")]
    assert table["seeds"] == [100, 200, 300]
    # 40%: the mean over seeds 100-300 only; FedAvg at 0% is the Clean row's value
    assert table["cells"][("fedlns", (0.4, "best"))][::2] == (pytest.approx(3.2), 3)
    assert table["cells"][("fedavg", (0.0, "best"))][0] == pytest.approx(2.2)
    assert table["cells"][("clean", (0.3, "best"))][0] == pytest.approx(2.2)
    assert table["cells"][("flame", (0.2, "best"))][::2] == (pytest.approx(3.85), 2)
    markdown = to_markdown(table)
    assert "Seeds: 100, 200, 300. Those run at every fraction; all seeds of the 40% comparison " \
           "(100, 200, 300, 400)" in markdown
    assert "3.85 ± 0.07 (n=2)" in markdown and "(n=3)" not in markdown
    assert "Seeds: 100, 200, 300." in to_latex(table)
    # with the 40% comparison alone, every seed is the table's
    only40 = [s for s in summaries if s["fraction"] in (0.0, 0.4) and (s["fraction"] == 0.4 or s["method"] == "fedavg")]
    table = next(t for t in fraction_tables(only40) if t["metric"] == "eval_loss")
    assert table["seeds"] == [100, 200, 300, 400] and "Those run at every fraction" not in to_markdown(table)
    result = write_report(tmp_path, tmp_path / "report")
    assert (tmp_path / "report" / "perplexity_vs_fraction.svg").stat().st_size > 1000
    # at a glance, a 10% row (seeds 100-300) has its clean run over the same three seeds, not seed 400's too
    row = next(line for line in result["tables"].read_text().splitlines()
               if line.startswith("| GPT") and "| 10% |" in line)
    best, last = (np.mean([math.exp(f(x)) for x in (2.1, 2.2, 2.3)]) for f in (lambda x: x, lambda x: (x + 3) / 2))
    assert row.split(" | ")[3] == "3" and row.split(" | ")[-2] == f"{best:.0f} / {last:.0f}" == "9 / 13"


def test_clean_cost_pairs_each_defence_at_zero_percent_with_clean_fedavg(tmp_path):
    """At 0% malicious, a defence's cost is its perplexity minus FedAvg's at the same seed; seed 300 has no clean
    FedAvg run and is left out; FedAvg (the reference) and 40% runs have no row."""
    flat = [9.0, 6.0, 6.0]
    clean = {100: 3.0, 200: 3.2}
    for seed, loss in clean.items():
        _fake_run(tmp_path, "fedavg", seed, [9.0, loss, 5.0], flat, fraction=0.0)
    fedlns = {100: 3.1, 200: 3.5, 300: 3.0}
    for seed, loss in fedlns.items():
        _fake_run(tmp_path, "fedlns", seed, [9.0, loss, 5.0], flat, fraction=0.0)
        _fake_run(tmp_path, "fedlns", seed, [9.0, loss, 5.0], flat, fraction=0.4)
    _fake_run(tmp_path, "norm_bounded_fedavg", 100, [9.0, 2.9, 5.0], flat, fraction=0.0)
    rows = clean_cost_rows(load_runs(tmp_path))
    assert [(r["method"], r["seeds"]) for r in rows] == [("norm_bounded_fedavg", [100]), ("fedlns", [100, 200])]
    row = rows[1]
    differences = [math.exp(fedlns[s]) - math.exp(clean[s]) for s in (100, 200)]
    assert row["best"]["mean"] == pytest.approx(np.mean(differences))
    assert row["best_relative"]["mean"] == pytest.approx(np.mean([math.exp(fedlns[s] - clean[s]) - 1
                                                                   for s in (100, 200)]))
    last10 = [math.exp((fedlns[s] + 5.0) / 2) - math.exp((clean[s] + 5.0) / 2) for s in (100, 200)]
    assert row["last10"]["mean"] == pytest.approx(np.mean(last10))
    assert row["fpr"] == 0.0    # every fake round: fp=0, tn=3
    assert rows[0]["best"]["mean"] < 0 and math.isnan(rows[0]["best"]["low"])    # one seed: no interval
    text = write_report(tmp_path, tmp_path / "report")["tables"].read_text()
    assert "## What each defence costs without attackers (0% malicious)" in text
    line = next(x for x in text.splitlines() if x.startswith("| GPT") and "| FedLNS |" in x and "| 2 |" in x)
    assert line.endswith("| 0.0% |") and f"{100 * row['best_relative']['mean']:+.1f} [" in line
