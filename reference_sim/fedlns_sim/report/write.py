"""The whole report of a folder of runs: ``tables.md`` (what made it, then every table), ``tables.tex``,
``tables.csv``, ``runs.csv`` and the plots."""

from __future__ import annotations

import csv
from pathlib import Path

from ..runstore import run_names, source_name
from .compare import attack_matrix, clean_cost_rows, matrix_references, paired_rows, recovery_rows
from .load import check_same_code, load_runs, machines_text
from .markdown import (
    attack_matrix_markdown,
    clean_cost_markdown,
    detection_markdown,
    glance_markdown,
    paired_markdown,
    recovery_markdown,
    timing_markdown,
)
from .plots import plot_all
from .tables import bank_tables, fraction_tables, gmm_tables, tables_csv, to_latex, to_markdown

#: Summary fields that are not one number or word per run, so not columns of ``runs.csv``.
NOT_IN_CSV = ("curve", "early_best", "attackers_only_rounds", "confirmed_cut_rounds", "config")


def write_report(root: str | Path, out: str | Path, plots: bool = True, allow_mixed_code: bool = False) -> dict:
    """Write ``tables.md``, ``tables.tex``, ``tables.csv``, ``runs.csv`` and the SVG plots into ``out``.

    Raises ``FileNotFoundError`` when ``root`` holds no finished run and :class:`.load.MixedCodeError` when its runs
    were made by different code (unless ``allow_mixed_code``).
    """
    summaries = load_runs(root)
    if not summaries:
        raise FileNotFoundError(f"no finished run under {root}")
    code = None if allow_mixed_code else check_same_code(summaries)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # run folders without a finished run's records (in progress, failed, or damaged): named, never silently dropped
    kept = {s["run"] for s in summaries}
    left_out = [name for name in run_names(root) if name not in kept]
    tables = fraction_tables(summaries) + gmm_tables(summaries) + bank_tables(summaries)
    paired, recovered = paired_rows(summaries), recovery_rows(summaries)
    sources = sorted({s["data_source"] for s in summaries if s["data_source"]})
    made_by = (
        "code of several versions (--allow-mixed-code)"
        if code is None
        else f"fedlns-core {code['version']}, source hash `{code['source']}`, commit "
        f"`{(code['commit'] or 'unknown')[:12]}`" + (" with uncommitted changes" if code["dirty"] else "")
    )
    markdown = [
        "# Results",
        "",
        f"Made by `fedlns_sim.report` from the run files under `{source_name(root)}/` ({len(summaries)} "
        f"finished runs"
        + (f"; {len(left_out)} left out, unfinished or without records" if left_out else "")
        + f"), all run by {made_by}, on {machines_text(summaries)}. "
        "Per seed, the checkpoint with the lowest evaluation loss (best) and the mean of the last 10 rounds "
        "(for perplexity: exp of the mean loss); mean ± sample standard deviation over seeds (no ± with one "
        "seed). References in italics: *Oracle* averages the round's benign clients only (it reads the "
        "ground truth); *Clean* is FedAvg with no malicious client; *Unigram* is an add-one unigram model "
        "of the training tokens.",
        "",
        "Data: " + "; ".join(sources),
        "",
    ]
    glance = glance_markdown(summaries, paired, recovered)
    if glance:
        markdown += [
            "## At a glance",
            "",
            "Perplexity, mean over seeds of the best checkpoint / of the last-10-round mean. Strongest "
            "baseline: the lowest mean best-checkpoint perplexity of the baselines run at that setting. "
            "Every cell of a row is over the row's seeds. TPR/FPR pooled over the seeds' decided rounds. "
            "Recovery: (FedAvg - FedLNS) / (FedAvg - Oracle), per seed, mean and 95% t interval. Clean: "
            "FedAvg with no attacker.",
            "",
            glance,
        ]
    markdown += [to_markdown(t) for t in tables]
    if paired:
        markdown += [
            "## FedLNS against the strongest baseline, paired by seed",
            "",
            "Perplexity of FedLNS minus the other method's, per seed; mean and 95% t interval over seeds "
            "(negative: FedLNS better). The strongest baseline is the one with the lowest mean "
            "best-checkpoint perplexity at that setting.",
            "",
            paired_markdown(paired),
        ]
    if recovered:
        markdown += [
            "## Recovery: (FedAvg - method) / (FedAvg - Oracle)",
            "",
            "1 = as good as averaging the benign clients only, 0 = no better than FedAvg under attack. "
            "Per-seed values with a 95% t interval, and the ratio of the seed means.",
            "",
            recovery_markdown(recovered),
        ]
    clean_cost = clean_cost_rows(summaries)
    if clean_cost:
        markdown += [
            "## What each defence costs without attackers (0% malicious)",
            "",
            "Perplexity of the defence minus clean FedAvg's (FedAvg at 0%), per seed; mean and 95% t "
            "interval over seeds, absolute and relative to FedAvg (positive: the defence is worse). "
            "Benign clients rejected: pooled over the decided rounds, for methods that pick clients.",
            "",
            clean_cost_markdown(clean_cost),
        ]
    matrix = attack_matrix(summaries)
    if matrix:
        markdown += [
            "## Robustness matrix: attack x method",
            "",
            "Perplexity, mean ± std over seeds; *rec* = recovery (FedAvg - method) / "
            "(FedAvg - Oracle) under the same attack, mean over seeds, left out where the attack did not "
            "raise FedAvg above the oracle at every seed (then it is undefined); for methods that pick "
            "clients, TPR/FPR pooled over seeds; for the backdoor, its success rate over the last 10 "
            "rounds. Under each table, the references no attack changes: *Oracle* (FedAvg over the round's "
            "benign clients only) and *Clean* (FedAvg with no attacker). `attack_matrix.svg`: "
            "best-checkpoint perplexity above the oracle's, per seed.",
            "",
            attack_matrix_markdown(matrix, matrix_references(summaries)),
        ]
    markdown += [
        "## Detection (positive = rejected) and FedLNS's screening diagnostics",
        "",
        detection_markdown(summaries),
        "## Wall time per run (seconds, mean over runs)",
        "",
        timing_markdown(summaries),
    ]
    (out / "tables.md").write_text("\n".join(markdown))
    (out / "tables.tex").write_text("\n".join(to_latex(t) for t in tables))
    (out / "tables.csv").write_text(tables_csv(tables))
    with open(out / "runs.csv", "w", newline="") as handle:
        fields = [k for k in summaries[0] if k not in NOT_IN_CSV]
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(summaries)
    paths = []
    if plots:
        paths = plot_all(summaries, recovered, out, matrix)
    return {
        "tables": out / "tables.md",
        "plots": paths,
        "summaries": summaries,
        "table_objects": tables,
        "paired": paired,
        "recovery": recovered,
        "clean_cost": clean_cost,
        "matrix": matrix,
        "code": code,
        "left_out": left_out,
    }
