"""The tables of cells (mean, std, seeds) as Markdown, LaTeX laid out like the paper's, and long-form CSV.

Per family and partition, methods x malicious fractions (best checkpoint and last 10 rounds) with the references
*Oracle*, *Clean* and, for perplexity, *Unigram*; the GMM-selection and bank-coverage ablations. A table is a
dict: ``title``, ``columns`` (labels) over ``keys``, ``rows``, ``cells`` ``{(row, key): (mean, std, n)}``, and
optionally ``row_names``, ``row_header``, ``references``, ``seeds``, ``note``, ``digits`` and ``metric``.
"""

from __future__ import annotations

import csv
import io
import math

from ..config import FAMILIES, FAMILY_NAMES, METHOD_NAMES, PARTITION_NAMES, PARTITIONS
from .compare import KINDS, group_runs, main_runs, ordered, sweep_seeds, table_fractions
from .load import PAPER_ATTACK, family_label
from .stats import mean_std

METRICS = {"eval_loss": "Test Loss", "perplexity": "Test PPL", "entropy": "Semantic Entropy"}
CLEAN, UNIGRAM = "clean", "unigram"  # reference rows besides the oracle method
ROW_NAMES = {**METHOD_NAMES, CLEAN: "Clean (FedAvg, 0% malicious)", UNIGRAM: "Unigram model"}


def fraction_tables(summaries: list[dict]) -> list[dict]:
    """The appendix tables with references: per (family, partition, metric) rows = methods, then Oracle, Clean and
    (perplexity) Unigram; columns = malicious fractions x {best checkpoint, last 10 rounds}."""
    main = [s for s in main_runs(summaries) if s["method"] != "fedlns_two"]
    tables = []
    for family in FAMILIES:
        for partition in PARTITIONS:
            subset = [s for s in main if s["family"] == family and s["partition"] == partition]
            if not subset:
                continue
            # every column over the same seeds: the fraction sweep may have fewer seeds than the 40% comparison
            seeds, all_seeds = sweep_seeds(subset), sorted({s["seed"] for s in subset})
            subset = [s for s in subset if s["seed"] in seeds]
            note = f"Seeds: {_seed_list(seeds)}."
            if seeds != all_seeds:
                top = percent_text(max(s["fraction"] for s in subset))
                note += (
                    f" Those run at every fraction; all seeds of the {top}"
                    f" comparison ({_seed_list(all_seeds)}) are in 'At a glance' and the paired tables."
                )
            fractions = table_fractions(subset)
            methods = ordered({s["method"] for s in subset})
            methods = [m for m in methods if m != "oracle"] + [m for m in methods if m == "oracle"]
            clean = [s for s in subset if s["method"] == "fedavg" and s["fraction"] == 0.0]
            groups = group_runs(subset, ("method", "fraction"))
            columns = [(f, kind) for f in fractions for kind in KINDS]
            for metric, title in METRICS.items():
                cells = {}
                for (method, fraction), runs in groups.items():
                    for kind in KINDS:
                        cells[(method, (fraction, kind))] = _stat(runs, metric, kind)
                rows = list(methods)
                if clean:
                    rows.append(CLEAN)
                    for column in columns:
                        cells[(CLEAN, column)] = _stat(clean, metric, column[1])
                if metric == "perplexity":
                    unigram = list(
                        {
                            s["seed"]: s["unigram_perplexity"] for s in subset if s["unigram_perplexity"] is not None
                        }.values()
                    )  # one value per seed
                    if unigram:
                        rows.append(UNIGRAM)
                        for column in columns:
                            cells[(UNIGRAM, column)] = mean_std(unigram) + (len(unigram),)
                tables.append(
                    {
                        "family": family,
                        "partition": partition,
                        "metric": metric,
                        "title": f"{title} under different malicious-client fractions for "
                        f"{family_label(family, subset)} with {PARTITION_NAMES[partition]} partition "
                        "(best checkpoint and mean of the last 10 rounds)",
                        "columns": [f"{percent_text(f)} {KINDS[kind]}" for f, kind in columns],
                        "keys": columns,
                        "rows": rows,
                        "cells": cells,
                        "seeds": seeds,
                        "note": note,
                        "references": {"oracle", CLEAN, UNIGRAM},
                    }
                )
    return tables


def _seed_list(seeds) -> str:
    return ", ".join(str(seed) for seed in seeds)


def _stat(runs, metric, kind):
    key = metric if kind == "best" else f"last10_{metric}"
    return mean_std([s[key] for s in runs]) + (len(runs),)


def gmm_tables(summaries: list[dict]) -> list[dict]:
    """GMM-selection ablation (BIC vs forced two components): rows = rule, columns = families, same seeds."""
    tables = []
    subset = [s for s in main_runs(summaries) if s["method"] in ("fedlns", "fedlns_two")]
    key = lambda s: (s["family"], s["partition"], s["fraction"], s["seed"])  # noqa: E731
    both = {key(s) for s in subset if s["method"] == "fedlns"} & {key(s) for s in subset if s["method"] == "fedlns_two"}
    subset = [s for s in subset if key(s) in both]
    for (partition, fraction), runs in sorted(group_runs(subset, ("partition", "fraction")).items()):
        families = [f for f in FAMILIES if any(s["family"] == f for s in runs)]
        groups = group_runs(runs, ("method", "family"))
        for metric, title in METRICS.items():
            tables.append(
                {
                    "title": f"GMM-selection ablation under {PARTITION_NAMES[partition]} partition with "
                    f"{percent_text(fraction)} malicious clients. Metric: {title}",
                    "columns": [FAMILY_NAMES[f] for f in families],
                    "keys": families,
                    "rows": ["fedlns", "fedlns_two"],
                    "metric": metric,
                    "cells": {k: mean_std([s[metric] for s in rs]) + (len(rs),) for k, rs in groups.items()},
                    "row_names": {"fedlns": "BIC 1/2-GMM", "fedlns_two": "Forced 2-GMM"},
                    "row_header": "GMM rule",
                }
            )
    return tables


def bank_tables(summaries: list[dict]) -> list[dict]:
    """Bank-coverage ablation: rows = M_act/K, columns = families; best of the first ten active rounds."""
    subset = [s for s in summaries if s["method"] == "fedlns" and s["attack"] == PAPER_ATTACK]
    tables = []
    for (partition, fraction), runs in sorted(group_runs(subset, ("partition", "fraction")).items()):
        if len({s["coverage"] for s in runs}) < 2:
            continue
        families = [f for f in FAMILIES if any(s["family"] == f for s in runs)]
        groups = group_runs(runs, ("coverage", "family"))
        coverages = sorted({s["coverage"] for s in runs})
        names = {c: f"{round(c * 100)}%" for c in coverages}
        common = {
            "columns": [FAMILY_NAMES[f] for f in families],
            "keys": families,
            "rows": coverages,
            "row_names": names,
            "row_header": "M_act/K",
        }
        tables.append(
            {
                **common,
                "title": f"Activation rounds, {PARTITION_NAMES[partition]} partition, "
                f"{percent_text(fraction)} malicious",
                "metric": "activation_round",
                "digits": 1,
                "cells": {k: mean_std([s["activation_round"] for s in rs]) + (len(rs),) for k, rs in groups.items()},
            }
        )
        for metric, title in METRICS.items():
            tables.append(
                {
                    **common,
                    "metric": metric,
                    "title": f"Bank-coverage ablation, first ten active rounds, {PARTITION_NAMES[partition]} "
                    f"partition, {percent_text(fraction)} malicious. Metric: {title}",
                    "cells": {
                        k: mean_std([s["early_best"][metric] for s in rs]) + (len(rs),) for k, rs in groups.items()
                    },
                }
            )
    return tables


def to_markdown(table: dict) -> str:
    """A table as Markdown; the lowest mean per column among the compared methods is bold (references never)."""
    names = table.get("row_names", ROW_NAMES)
    best = _best_per_column(table)
    lines = [
        f"**{table['title']}**",
        "",
        f"| {table.get('row_header', 'Method')} | " + " | ".join(table["columns"]) + " |",
        "|---" * (len(table["columns"]) + 1) + "|",
    ]
    for row in table["rows"]:
        cells = []
        for column in table["keys"]:
            if (row, column) not in table["cells"]:
                cells.append("–")
                continue
            mean, std, n = table["cells"][(row, column)]
            text = cell_text(mean, std, table.get("digits", 2))
            text = f"**{text}**" if best.get(column) == row else text
            if len(table.get("seeds", ())) > n:  # a cell with fewer seeds than the table
                text += f" (n={n})"
            cells.append(text)
        name = names.get(row, row)
        lines.append(
            f"| {'*' + name + '*' if row in table.get('references', ()) else name} | " + " | ".join(cells) + " |"
        )
    if table.get("note"):
        lines += ["", table["note"]]
    return "\n".join(lines) + "\n"


def to_latex(table: dict) -> str:
    """A table laid out like the paper's (booktabs, mean $\\pm$ std, best in bold, references in italics)."""
    names = table.get("row_names", ROW_NAMES)
    best = _best_per_column(table)
    caption = table["title"] + "." + (" " + table["note"] if table.get("note") else "")
    out = [
        "\\begin{table}[ht]\\centering",
        "\\caption{" + caption.replace("%", "\\%") + "}",
        "\\begin{tabular}{l" + "c" * len(table["columns"]) + "}",
        "\\toprule",
        table.get("row_header", "Method").replace("M_act", "$M_{\\mathrm{act}}$")
        + " & "
        + " & ".join(c.replace("%", "\\%") for c in table["columns"])
        + " \\\\",
        "\\midrule",
    ]
    for row in table["rows"]:
        cells = []
        for column in table["keys"]:
            if (row, column) not in table["cells"]:
                cells.append("--")
                continue
            mean, std, _ = table["cells"][(row, column)]
            text = cell_text(mean, std, table.get("digits", 2)).replace("±", "$\\pm$")
            cells.append(f"\\textbf{{{text}}}" if best.get(column) == row else text)
        name = f"{names.get(row, row)}".replace("%", "\\%")
        out.append(
            ("\\textit{" + name + "}" if row in table.get("references", ()) else name)
            + " & "
            + " & ".join(cells)
            + " \\\\"
        )
    out += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(out)


def _best_per_column(table):
    best = {}
    if table.get("metric") == "activation_round":
        return best
    for column in table["keys"]:
        candidates = [
            (table["cells"][(row, column)][0], i, row)
            for i, row in enumerate(table["rows"])
            if (row, column) in table["cells"]
            and row not in table.get("references", ())
            and math.isfinite(table["cells"][(row, column)][0])
        ]
        if candidates:
            best[column] = min(candidates)[2]
    return best


def tables_csv(tables: list[dict]) -> str:
    """Long-form CSV of every table cell: title, row, column, mean, std, n_seeds."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["table", "metric", "row", "column", "mean", "std", "n_seeds"])
    for table in tables:
        names = table.get("row_names", ROW_NAMES)
        for row in table["rows"]:
            for column, label in zip(table["keys"], table["columns"]):
                if (row, column) in table["cells"]:
                    mean, std, n = table["cells"][(row, column)]
                    writer.writerow([table["title"], table["metric"], names.get(row, row), label, mean, std, n])
    return buffer.getvalue()


def cell_text(mean, std, digits):
    """``mean ± std`` with ``digits`` decimals (no ``±`` for a NaN std), ``inf`` for a diverged mean."""
    if not math.isfinite(mean):
        return "inf"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if math.isfinite(std) else "")


def percent_text(fraction: float) -> str:
    """0.4 -> ``40%``."""
    return f"{fraction * 100:g}%"
