"""Tables and plots made from run files only (config.json + rounds.jsonl), never from in-memory state.

Tables follow the paper's appendix: per seed, the checkpoint with the lowest evaluation loss gives loss,
perplexity and entropy; entries are the mean and sample standard deviation over seeds.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from .config import METHODS
from .methods import DISPLAY_NAMES
from .metrics import best_checkpoint, detection_rates
from .run import read_records

FAMILY_NAMES = {"gpt": "GPT / WikiText", "bert": "BERT / Shakespeare", "llama": "LLaMA / StackOverflow"}
PARTITION_NAMES = {"iid": "IID", "noniid": "Non-IID"}
METRICS = {"eval_loss": "Test Loss", "perplexity": "Test PPL", "entropy": "Semantic Entropy"}
# Not in the paper: how stable the end of training is (the paper's best-checkpoint rule hides swings).
STABILITY = {"last10_perplexity": "PPL of the last 10 rounds (exp of their mean loss; not a paper table)"}


def load_runs(root: str | Path, finished_only: bool = True) -> list[dict]:
    """One summary per run folder under ``root``: its config, best checkpoint, detection totals and timings.

    Runs still in progress (fewer records than rounds) are left out unless ``finished_only=False``: a table must
    not mix a method's 40-round result with another's 12-round one.
    """
    summaries = []
    for config_path in sorted(Path(root).rglob("config.json")):
        meta = json.loads(config_path.read_text())
        config = meta["config"]
        records = read_records(config_path.parent)
        trained = [r for r in records if r["round"] >= 1]
        if not trained or (finished_only and trained[-1]["round"] < config["rounds"]):
            continue
        best = best_checkpoint(records)
        decided = [r for r in trained if r.get("decided") and "tp" in r]
        totals = {k: sum(r[k] for r in decided) for k in ("tp", "fp", "fn", "tn")}
        active = [r["round"] for r in trained if r.get("active", True) and r.get("decided", True)]
        summaries.append({
            "run": config_path.parent.name, "family": config["family"], "partition": config["partition"],
            "method": config["method"], "fraction": config["malicious_fraction"], "seed": config["seed"],
            "coverage": config["activation_coverage"], "rounds": config["rounds"], "completed": trained[-1]["round"],
            "best_round": best["round"], "eval_loss": best["eval_loss"], "perplexity": _ppl(best),
            "entropy": best["entropy"], "initial_perplexity": _ppl(records[0]) if records[0]["round"] == 0 else None,
            "final_perplexity": _ppl(trained[-1]),
            "last10_perplexity": _exp_mean_loss(trained[-10:]), "selects_clients": any(r.get("selects_clients") for r in trained),
            **totals, **detection_rates(**totals),
            "client_time_s": sum(r["client_time_s"] for r in trained),
            "server_time_s": sum(r["server_time_s"] for r in trained),
            "eval_time_s": sum(r["eval_time_s"] for r in trained),
            "activation_round": active[0] if active else None,
            "early_best": _early_best(trained, active[0]) if active else None,
            "curve": [(r["round"], _ppl(r)) for r in records],
            "n_parameters": meta.get("n_parameters"), "data_source": meta.get("data_source"),
        })
    return summaries


def family_label(family: str, runs: list[dict]) -> str:
    """'GPT / WikiText' etc., or 'GPT / synthetic corpus' when the runs used the generated corpus."""
    if runs and all((s.get("data_source") or "").startswith("synthetic") for s in runs):
        return f"{FAMILY_NAMES[family].split(' /')[0]} / synthetic corpus"
    return FAMILY_NAMES[family]


def _exp_mean_loss(records: list[dict]) -> float:
    losses = [r["eval_loss"] for r in records]
    return float("inf") if any(x is None for x in losses) else min(math.exp(float(np.mean(losses))), float("inf"))


def _ppl(record: dict) -> float:
    value = record.get("perplexity")
    return float("inf") if value is None else value


def _early_best(trained: list[dict], activation_round: int, window: int = 10) -> dict:
    """Bank-coverage ablation rule: the best of the first ``window`` active rounds."""
    rows = [r for r in trained if activation_round <= r["round"] < activation_round + window]
    best = min(rows, key=lambda r: r["eval_loss"] if r["eval_loss"] is not None else float("inf"))
    return {"eval_loss": best["eval_loss"], "perplexity": _ppl(best), "entropy": best["entropy"]}


def main_runs(summaries: list[dict]) -> list[dict]:
    """Runs of the main comparison: FedLNS only at its default activation coverage (others are ablation runs)."""
    coverages = {s["coverage"] for s in summaries if s["method"] == "fedlns"}
    default = 0.5 if 0.5 in coverages or not coverages else min(coverages)
    return [s for s in summaries if s["method"] not in ("fedlns", "fedlns_two") or s["coverage"] == default]


def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; NaN for a single value).

    Examples
    --------
    >>> mean_std([1.0, 2.0, 3.0])
    (2.0, 1.0)
    """
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else float("nan")


def _group(summaries, keys):
    groups = defaultdict(list)
    for s in summaries:
        groups[tuple(s[k] for k in keys)].append(s)
    return groups


def _cell(mean, std, digits):
    if not math.isfinite(mean):
        return "inf"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if math.isfinite(std) else "")


def _ordered_methods(present):
    return [m for m in METHODS if m in present]


# ------------------------------------------------------------------------------------------ tables

def fraction_tables(summaries: list[dict]) -> list[dict]:
    """The appendix tables: per (family, partition, metric) rows = methods, columns = malicious fractions."""
    main = [s for s in main_runs(summaries) if s["method"] != "fedlns_two"]
    tables = []
    for family in ("gpt", "bert", "llama"):
        for partition in ("iid", "noniid"):
            subset = [s for s in main if s["family"] == family and s["partition"] == partition]
            if not subset:
                continue
            fractions = sorted({s["fraction"] for s in subset})
            methods = _ordered_methods({s["method"] for s in subset})
            groups = _group(subset, ("method", "fraction"))
            for metric, title in {**METRICS, **STABILITY}.items():
                cells = {key: mean_std([s[metric] for s in runs]) + (len(runs),) for key, runs in groups.items()}
                tables.append({"family": family, "partition": partition, "metric": metric,
                               "title": f"{title} under different malicious-client fractions for "
                                        f"{family_label(family, subset)} with {PARTITION_NAMES[partition]} partition",
                               "columns": [f"{round(f * 100)}%" for f in fractions], "fractions": fractions,
                               "rows": methods, "cells": cells})
    return tables


def gmm_tables(summaries: list[dict]) -> list[dict]:
    """GMM-selection ablation (BIC vs forced two components): rows = rule, columns = families."""
    tables = []
    subset = [s for s in main_runs(summaries) if s["method"] in ("fedlns", "fedlns_two")]
    # compare the two rules on the same seeds only
    key = lambda s: (s["family"], s["partition"], s["fraction"], s["seed"])  # noqa: E731
    both = {key(s) for s in subset if s["method"] == "fedlns"} & {key(s) for s in subset if s["method"] == "fedlns_two"}
    subset = [s for s in subset if key(s) in both]
    if not subset:
        return tables
    for (partition, fraction), runs in sorted(_group(subset, ("partition", "fraction")).items()):
        families = [f for f in ("gpt", "bert", "llama") if any(s["family"] == f for s in runs)]
        groups = _group(runs, ("method", "family"))
        for metric, title in METRICS.items():
            cells = {key: mean_std([s[metric] for s in rs]) + (len(rs),) for key, rs in groups.items()}
            tables.append({"title": f"GMM-selection ablation under {PARTITION_NAMES[partition]} partition with "
                                    f"{round(fraction * 100)}% malicious clients. Metric: {title}",
                           "columns": [FAMILY_NAMES[f] for f in families], "fractions": families,
                           "rows": ["fedlns", "fedlns_two"], "cells": cells, "metric": metric,
                           "row_names": {"fedlns": "BIC 1/2-GMM", "fedlns_two": "Forced 2-GMM"},
                           "row_header": "GMM rule"})
    return tables


def bank_tables(summaries: list[dict]) -> list[dict]:
    """Bank-coverage ablation: rows = M_act/K, columns = families; best of the first ten active rounds."""
    subset = [s for s in summaries if s["method"] == "fedlns"]
    tables = []
    for (partition, fraction), runs in sorted(_group(subset, ("partition", "fraction")).items()):
        if len({s["coverage"] for s in runs}) < 2:
            continue
        families = [f for f in ("gpt", "bert", "llama") if any(s["family"] == f for s in runs)]
        groups = _group(runs, ("coverage", "family"))
        coverages = sorted({s["coverage"] for s in runs})
        names = {c: f"{round(c * 100)}%" for c in coverages}
        cells = {key: mean_std([s["activation_round"] for s in rs]) + (len(rs),) for key, rs in groups.items()}
        tables.append({"title": f"Activation rounds, {PARTITION_NAMES[partition]} partition, "
                                f"{round(fraction * 100)}% malicious", "columns": [FAMILY_NAMES[f] for f in families],
                       "fractions": families, "rows": coverages, "row_names": names, "cells": cells,
                       "metric": "activation_round", "digits": 1, "row_header": "M_act/K"})
        for metric, title in METRICS.items():
            cells = {key: mean_std([s["early_best"][metric] for s in rs]) + (len(rs),) for key, rs in groups.items()}
            tables.append({"title": f"Bank-coverage ablation, first ten active rounds, {PARTITION_NAMES[partition]} "
                                    f"partition, {round(fraction * 100)}% malicious. Metric: {title}",
                           "columns": [FAMILY_NAMES[f] for f in families], "fractions": families, "rows": coverages,
                           "row_names": names, "cells": cells, "metric": metric, "row_header": "M_act/K"})
    return tables


def _digits(table):
    return table.get("digits", 2)


def to_markdown(table: dict) -> str:
    """A table as Markdown; the lowest mean per column is bold."""
    names = table.get("row_names", DISPLAY_NAMES)
    best = _best_per_column(table)
    lines = [f"**{table['title']}**", "", f"| {table.get('row_header', 'Method')} | " + " | ".join(table["columns"]) + " |",
             "|---" * (len(table["columns"]) + 1) + "|"]
    for row in table["rows"]:
        cells = []
        for column in table["fractions"]:
            if (row, column) not in table["cells"]:
                cells.append("–")
                continue
            mean, std, _ = table["cells"][(row, column)]
            text = _cell(mean, std, _digits(table))
            cells.append(f"**{text}**" if best.get(column) == row else text)
        lines.append(f"| {names.get(row, row)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_latex(table: dict) -> str:
    """A table laid out like the paper's (booktabs, mean $\\pm$ std, best in bold)."""
    names = table.get("row_names", DISPLAY_NAMES)
    best = _best_per_column(table)
    out = ["\\begin{table}[ht]\\centering", "\\caption{" + table["title"].replace("%", "\\%") + ".}",
           "\\begin{tabular}{l" + "c" * len(table["columns"]) + "}", "\\toprule",
           table.get("row_header", "Method").replace("M_act", "$M_{\\mathrm{act}}$") + " & "
           + " & ".join(c.replace("%", "\\%") for c in table["columns"]) + " \\\\", "\\midrule"]
    for row in table["rows"]:
        cells = []
        for column in table["fractions"]:
            if (row, column) not in table["cells"]:
                cells.append("--")
                continue
            mean, std, _ = table["cells"][(row, column)]
            text = _cell(mean, std, _digits(table)).replace("±", "$\\pm$")
            cells.append(f"\\textbf{{{text}}}" if best.get(column) == row else text)
        out.append(f"{names.get(row, row)}".replace("%", "\\%") + " & " + " & ".join(cells) + " \\\\")
    out += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(out)


def _best_per_column(table):
    best = {}
    for column in table["fractions"]:
        candidates = [(table["cells"][(row, column)][0], i, row) for i, row in enumerate(table["rows"])
                      if (row, column) in table["cells"] and math.isfinite(table["cells"][(row, column)][0])]
        if candidates and table.get("metric") != "activation_round":
            best[column] = min(candidates)[2]
    return best


def detection_table(summaries: list[dict]) -> str:
    """Kept/rejected against the ground truth, summed over the rounds where a method decided (Markdown)."""
    lines = ["| Model | Partition | Malicious | Method | TPR | FPR | Precision | Rejected updates |",
             "|---|---|---|---|---|---|---|---|"]
    for (family, partition, fraction, method), runs in sorted(
            _group(main_runs(summaries), ("family", "partition", "fraction", "method")).items(),
            key=lambda item: (item[0][0], item[0][1], item[0][2], METHODS.index(item[0][3]))):
        if not runs[0]["selects_clients"]:
            continue
        totals = {k: sum(s[k] for s in runs) for k in ("tp", "fp", "fn", "tn")}
        rates = detection_rates(**totals)
        lines.append(f"| {FAMILY_NAMES[family]} | {PARTITION_NAMES[partition]} | {round(fraction * 100)}% | "
                     f"{DISPLAY_NAMES[method]} | {_pct(rates['tpr'])} | {_pct(rates['fpr'])} | "
                     f"{_pct(rates['precision'])} | {totals['tp'] + totals['fp']} |")
    return "\n".join(lines) + "\n"


def _pct(value):
    return "–" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def timing_table(summaries: list[dict]) -> str:
    """Wall time per run: client training, server aggregation, evaluation (Markdown, mean over runs)."""
    lines = ["| Model | Method | Runs | Rounds | Client training (s) | Server aggregation (s) | Evaluation (s) |",
             "|---|---|---|---|---|---|---|"]
    for (family, method), runs in sorted(_group(summaries, ("family", "method")).items(),
                                         key=lambda item: (item[0][0], METHODS.index(item[0][1]))):
        lines.append(f"| {FAMILY_NAMES[family]} | {DISPLAY_NAMES[method]} | {len(runs)} | "
                     f"{np.mean([s['completed'] for s in runs]):.0f} | "
                     f"{np.mean([s['client_time_s'] for s in runs]):.1f} | "
                     f"{np.mean([s['server_time_s'] for s in runs]):.2f} | "
                     f"{np.mean([s['eval_time_s'] for s in runs]):.1f} |")
    return "\n".join(lines) + "\n"


def tables_csv(tables: list[dict]) -> str:
    """Long-form CSV of every table cell: title, row, column, mean, std, n_seeds."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["table", "metric", "row", "column", "mean", "std", "n_seeds"])
    for table in tables:
        names = table.get("row_names", DISPLAY_NAMES)
        for row in table["rows"]:
            for column, label in zip(table["fractions"], table["columns"]):
                if (row, column) in table["cells"]:
                    mean, std, n = table["cells"][(row, column)]
                    writer.writerow([table["title"], table["metric"], names.get(row, row), label, mean, std, n])
    return buffer.getvalue()


# ------------------------------------------------------------------------------------------ plots

def plot_all(summaries: list[dict], out: Path) -> list[Path]:
    """PNG plots: perplexity vs malicious fraction, per-round curves, detection rates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = main_runs(summaries)
    panels = sorted({(s["family"], s["partition"]) for s in main},
                    key=lambda p: (p[1], ["gpt", "bert", "llama"].index(p[0])))
    paths = []
    if not panels:
        return paths
    colors = {m: plt.get_cmap("tab10")(i) for i, m in enumerate(METHODS)}

    families = [f for f in ("gpt", "bert", "llama") if any(p[0] == f for p in panels)]
    partitions = [p for p in ("iid", "noniid") if any(q[1] == p for q in panels)]

    def grid():
        # rows = partitions, columns = families, as in the paper's figures; one axis per panel, in panel order
        figure, axes = plt.subplots(len(partitions), len(families), figsize=(4.6 * len(families), 3.9 * len(partitions)),
                                    squeeze=False)
        used = [axes[partitions.index(p)][families.index(f)] for f, p in panels]
        for row in axes:
            for axis in row:
                if not any(axis is u for u in used):
                    axis.set_visible(False)
        return figure, used

    def finish(figure, axes, path):
        axes[-1].legend(fontsize=7)
        figure.tight_layout()
        _save(figure, path)
        plt.close(figure)
        return path

    # 1. perplexity vs malicious fraction (bars with error bars when only one fraction was run)
    figure, axes = grid()
    for axis, (family, partition) in zip(axes, panels):
        runs = [s for s in main if s["family"] == family and s["partition"] == partition]
        fractions = sorted({s["fraction"] for s in runs})
        methods = _ordered_methods({s["method"] for s in runs})
        for i, method in enumerate(methods):
            stats = [mean_std([s["perplexity"] for s in runs if s["method"] == method and s["fraction"] == f])
                     if any(s["method"] == method and s["fraction"] == f for s in runs) else (np.nan, np.nan)
                     for f in fractions]
            means = [m for m, _ in stats]
            stds = [0.0 if not math.isfinite(sd) else sd for _, sd in stats]
            if len(fractions) == 1:
                axis.bar(i, means[0], yerr=stds[0], color=colors[method], label=DISPLAY_NAMES[method], capsize=3)
            else:
                axis.errorbar([100 * f for f in fractions], means, yerr=stds, marker="o", color=colors[method],
                              label=DISPLAY_NAMES[method], capsize=3)
        if len(fractions) == 1:
            axis.set_xticks(range(len(methods)), [DISPLAY_NAMES[m] for m in methods], rotation=60, fontsize=7)
            low = min(mean_std([s["perplexity"] for s in runs if s["method"] == m])[0] for m in methods)
            axis.set_ylim(bottom=0.9 * low)
            axis.set_title(f"{family_label(family, runs)}, {PARTITION_NAMES[partition]}\n"
                           f"{round(fractions[0] * 100)}% malicious", fontsize=9)
        else:
            axis.set_xlabel("malicious clients (%)")
            axis.set_title(f"{family_label(family, runs)}, {PARTITION_NAMES[partition]}", fontsize=9)
        axis.set_ylabel("perplexity (best checkpoint)")
    paths.append(finish(figure, axes, out / "perplexity_vs_fraction.png"))

    # 2. per-round curves at the largest fraction (seed mean)
    figure, axes = grid()
    for axis, (family, partition) in zip(axes, panels):
        runs = [s for s in main if s["family"] == family and s["partition"] == partition]
        top = max(s["fraction"] for s in runs)
        for method in _ordered_methods({s["method"] for s in runs}):
            curves = [dict(s["curve"]) for s in runs if s["method"] == method and s["fraction"] == top]
            rounds = sorted(set.intersection(*(set(c) for c in curves)))
            axis.plot(rounds, [np.mean([c[r] for c in curves]) for r in rounds], color=colors[method],
                      label=DISPLAY_NAMES[method], linewidth=1.2)
        axis.set_yscale("log")
        axis.set_xlabel("round")
        axis.set_ylabel("evaluation perplexity")
        axis.set_title(f"{family_label(family, runs)}, {PARTITION_NAMES[partition]}, {round(top * 100)}% malicious",
                       fontsize=9)
    paths.append(finish(figure, axes, out / "perplexity_per_round.png"))

    # 3. detection rates of the methods that pick clients
    figure, axes = grid()
    for axis, (family, partition) in zip(axes, panels):
        runs = [s for s in main if s["family"] == family and s["partition"] == partition and s["selects_clients"]]
        methods = _ordered_methods({s["method"] for s in runs})
        for i, method in enumerate(methods):
            totals = {k: sum(s[k] for s in runs if s["method"] == method) for k in ("tp", "fp", "fn", "tn")}
            rates = detection_rates(**totals)
            axis.bar(i - 0.2, rates["tpr"], width=0.4, color="tab:green", label="TPR" if i == 0 else None)
            axis.bar(i + 0.2, rates["fpr"], width=0.4, color="tab:red", label="FPR" if i == 0 else None)
        axis.set_xticks(range(len(methods)), [DISPLAY_NAMES[m] for m in methods], fontsize=8)
        axis.set_ylim(0, 1)
        axis.set_title(f"{family_label(family, runs)}, {PARTITION_NAMES[partition]}", fontsize=9)
        axis.set_ylabel("rate over decided rounds")
    paths.append(finish(figure, axes, out / "detection_rates.png"))
    return paths


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path


# ------------------------------------------------------------------------------------------ entry point

def write_report(root: str | Path, out: str | Path, plots: bool = True) -> dict:
    """Write ``tables.md``, ``tables.tex``, ``tables.csv``, ``runs.csv`` and the PNG plots into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summaries = load_runs(root)
    if not summaries:
        raise FileNotFoundError(f"no finished run under {root}")
    unfinished = len(load_runs(root, finished_only=False)) - len(summaries)
    tables = fraction_tables(summaries) + gmm_tables(summaries) + bank_tables(summaries)
    sources = sorted({s["data_source"] for s in summaries if s["data_source"]})
    learning = [f"| {FAMILY_NAMES[s['family']]} | {PARTITION_NAMES[s['partition']]} | {DISPLAY_NAMES[s['method']]} | "
                f"{round(s['fraction'] * 100)}% | {round(s['coverage'] * 100)}% | {s['seed']} | "
                f"{s['initial_perplexity']:.1f} | {s['perplexity']:.1f} "
                f"(round {s['best_round']}) | {s['final_perplexity']:.1f} |"
                for s in summaries if s["initial_perplexity"] is not None]
    markdown = ["# Results", "", f"Made by `fedlns_sim.report` from the run files under `{Path(root).name}/` "
                f"({len(summaries)} finished runs" + (f"; {unfinished} unfinished left out" if unfinished else "") + "). Per seed, the checkpoint with the lowest evaluation loss; "
                "mean ± sample standard deviation over seeds (no ± with one seed).", "",
                "Data: " + "; ".join(sources), ""]
    markdown += [to_markdown(t) for t in tables]
    markdown += ["## Detection (positive = rejected)", "", detection_table(summaries),
                 "## Wall time per run (seconds, mean over runs)", "", timing_table(summaries),
                 "## Learning: initial, best and final perplexity per run", "",
                 "| Model | Partition | Method | Malicious | M_act/K | Seed | Initial | Best | Final |",
                 "|---|---|---|---|---|---|---|---|---|", *learning, ""]
    (out / "tables.md").write_text("\n".join(markdown))
    (out / "tables.tex").write_text("\n".join(to_latex(t) for t in tables))
    (out / "tables.csv").write_text(tables_csv(tables))
    with open(out / "runs.csv", "w", newline="") as handle:
        fields = [k for k in summaries[0] if k not in ("curve", "early_best")]
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(summaries)
    paths = plot_all(summaries, out) if plots else []
    return {"tables": out / "tables.md", "plots": paths, "summaries": summaries, "table_objects": tables}
