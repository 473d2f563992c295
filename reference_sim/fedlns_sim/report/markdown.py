"""The report's other tables, in Markdown only: at a glance, FedLNS paired against the strongest baseline and
FedAvg, recovery, the cost without attackers, the attack x method matrix, detection and wall time."""

from __future__ import annotations

import math

import numpy as np

from ..config import ATTACK_NAMES, FAMILIES, FAMILY_NAMES, METHOD_NAMES, METHODS, PARTITION_NAMES
from .compare import group_runs, main_runs, setting_order
from .load import family_label
from .stats import detection_rates, mean_std
from .tables import cell_text, percent_text


def glance_markdown(summaries: list[dict], paired: list[dict], recovered: list[dict]) -> str:
    """One row per attacked setting: FedAvg, the strongest baseline, FedLNS (with its pooled TPR/FPR and its
    recovery), and the references, as mean best-checkpoint / mean last-10 perplexity over FedLNS's seeds at that
    setting (the clean run too: the fraction sweep has fewer seeds than the 40% comparison); empty when FedLNS or
    FedAvg did not run."""
    main = main_runs(summaries)
    groups = group_runs(main, ("family", "partition", "fraction", "method"))
    strongest = {
        (r["family"], r["partition"], r["fraction"]): r["baseline"]
        for r in paired
        if r["against"] == "strongest baseline"
    }
    fedlns_recovery = {(r["family"], r["partition"], r["fraction"]): r for r in recovered if r["method"] == "fedlns"}

    def both(runs):
        if not runs:
            return "–"
        best, last = (np.mean([s[key] for s in runs]) for key in ("perplexity", "last10_perplexity"))
        return f"{best:.0f} / {last:.0f}"

    lines = [
        "| Model | Partition | Malicious | Seeds | FedAvg | Strongest baseline | FedLNS | FedLNS TPR / FPR "
        "| FedLNS recovery, best [95% CI] | Oracle | Clean | Unigram |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    settings = sorted(
        {key[:3] for key in groups if key[2] > 0 and key[3] == "fedlns"}, key=lambda key: setting_order(*key)
    )
    for family, partition, fraction in settings:
        fedlns = groups[(family, partition, fraction, "fedlns")]
        seeds = {s["seed"] for s in fedlns}

        def runs_of(method, at=fraction):  # every cell of the row over the same seeds
            return [s for s in groups.get((family, partition, at, method), []) if s["seed"] in seeds]  # noqa: B023 - called in this iteration only

        fedavg = runs_of("fedavg")
        if not fedavg:
            continue
        baseline = strongest.get((family, partition, fraction))
        rates = detection_rates(**{k: sum(s[k] for s in fedlns) for k in ("tp", "fp", "fn", "tn")})
        recovery_row = fedlns_recovery.get((family, partition, fraction))
        unigram = [s["unigram_perplexity"] for s in fedlns if s["unigram_perplexity"] is not None]
        strongest_cell = f"{METHOD_NAMES[baseline]} {both(runs_of(baseline))}" if baseline else "–"
        lines.append(
            f"| {family_label(family, fedlns)} | {PARTITION_NAMES[partition]} | {percent_text(fraction)} | "
            f"{len(fedlns)} | {both(fedavg)} | {strongest_cell}"
            + f" | {both(fedlns)} | {_pct(rates['tpr'])} / {_pct(rates['fpr'])} | "
            + (_interval(recovery_row["best"], 2) if recovery_row else "–")
            + f" | {both(runs_of('oracle'))} | {both(runs_of('fedavg', at=0.0))} | "
            + (f"{np.mean(unigram):.0f}" if unigram else "–")
            + " |"
        )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def paired_markdown(rows: list[dict]) -> str:
    """The rows of :func:`.compare.paired_rows` as a Markdown table."""
    lines = [
        "| Model | Partition | Malicious | FedLNS minus | Seeds | Best checkpoint: mean [95% CI] | FedLNS better "
        "| Last 10 rounds: mean [95% CI] | FedLNS better |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n = len(r["seeds"])
        lines.append(
            f"| {r['model']} | {PARTITION_NAMES[r['partition']]} | {percent_text(r['fraction'])} | "
            f"{r['against']} ({METHOD_NAMES[r['baseline']]}) | {n} | {_interval(r['best'])} | "
            f"{r['best_wins']}/{n} | {_interval(r['last10'])} | {r['last10_wins']}/{n} |"
        )
    return "\n".join(lines) + "\n"


def recovery_markdown(rows: list[dict]) -> str:
    """The rows of :func:`.compare.recovery_rows` as a Markdown table."""
    lines = [
        "| Model | Partition | Malicious | Method | Seeds | Best: per-seed mean [95% CI] | Best: of means "
        "| Last 10: per-seed mean [95% CI] | Last 10: of means |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {PARTITION_NAMES[r['partition']]} | {percent_text(r['fraction'])} | "
            f"{METHOD_NAMES[r['method']]} | {len(r['seeds'])} | {_interval(r['best'], 2)} | "
            f"{r['best_of_means']:.2f} | {_interval(r['last10'], 2)} | {r['last10_of_means']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def clean_cost_markdown(rows: list[dict]) -> str:
    """The rows of :func:`.compare.clean_cost_rows` as a Markdown table."""
    lines = [
        "| Model | Partition | Method | Seeds | Best: minus FedAvg [95% CI] | Best: relative "
        "| Last 10: minus FedAvg [95% CI] | Last 10: relative | Benign clients rejected |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def relative(result):
        percent = {k: 100 * result[k] for k in ("mean", "low", "high")}
        return _interval(percent) + " %"

    for r in rows:
        lines.append(
            f"| {r['model']} | {PARTITION_NAMES[r['partition']]} | {METHOD_NAMES[r['method']]} | "
            f"{len(r['seeds'])} | {_interval(r['best'])} | {relative(r['best_relative'])} | "
            f"{_interval(r['last10'])} | {relative(r['last10_relative'])} | "
            + (_pct(r["fpr"]) if r["selects_clients"] else "–")
            + " |"
        )
    return "\n".join(lines) + "\n"


def _interval(result: dict, digits: int = 1) -> str:
    if not math.isfinite(result["low"]):
        return f"{result['mean']:+.{digits}f}"
    return f"{result['mean']:+.{digits}f} [{result['low']:+.{digits}f}, {result['high']:+.{digits}f}]"


def attack_matrix_markdown(cells: list[dict], references: dict | None = None) -> str:
    """Two tables per (family, partition, fraction), rows = methods, columns = attacks: the best checkpoint (with
    the recovery where the attack harmed FedAvg at every seed, detection rates and the backdoor's success), and
    the mean of the last 10 rounds; under each, the oracle and clean references (:func:`.compare.matrix_references`)."""
    references = references or {}
    out = []
    for (family, partition, fraction), group in group_runs(cells, ("family", "partition", "fraction")).items():
        attacks = [a for a in ATTACK_NAMES if any(c["attack"] == a for c in group)]
        methods = [m for m in METHODS if any(c["method"] == m for c in group)]
        by = {(c["method"], c["attack"]): c for c in group}
        setting = f"{FAMILY_NAMES[family]}, {PARTITION_NAMES[partition]}, {percent_text(fraction)} malicious"
        for title, metric in (
            (
                f"**{setting}: best-checkpoint perplexity (recovery; TPR/FPR for methods that pick "
                "clients; backdoor success)**",
                "perplexity",
            ),
            (f"**{setting}: perplexity, mean of the last 10 rounds**", "last10_perplexity"),
        ):
            out += [title, "", "| Method | " + " | ".join(attacks) + " |", "|---" * (len(attacks) + 1) + "|"]
            out += [
                f"| {METHOD_NAMES[method]} | "
                + " | ".join(_matrix_cell(by.get((method, attack)), metric) for attack in attacks)
                + " |"
                for method in methods
            ]
            known = references.get((family, partition, fraction), {})
            if known:
                out += [
                    "",
                    "References, whatever the attack: "
                    + "; ".join(
                        f"*{name}* {cell_text(*mean_std([s[metric] for s in runs]), 0)} ({len(runs)} seeds)"
                        for name, runs in known.items()
                    )
                    + ".",
                ]
            out.append("")
    return "\n".join(out)


def _matrix_cell(cell: dict | None, metric: str) -> str:
    """One cell of the attack matrix: the perplexity; at the best checkpoint also the recovery (where defined),
    the detection rates and the backdoor's success rate."""
    if cell is None:
        return "–"
    mean, std = cell[metric]
    text = cell_text(mean, std, 0)
    if metric != "perplexity":
        return text
    if cell["method"] != "fedavg" and cell["recovery"] is not None and math.isfinite(cell["recovery"]["mean"]):
        text += f" (rec {cell['recovery']['mean']:.2f})"
    if cell["selects_clients"] and math.isfinite(cell["tpr"]):
        text += f" {_pct(cell['tpr'])}/{_pct(cell['fpr'])}"
    if cell["attack"] == "backdoor" and math.isfinite(cell["backdoor_asr"][0]):
        text += f" ASR {cell['backdoor_asr'][0]:.2f}"
    return text


def detection_markdown(summaries: list[dict]) -> str:
    """Kept/rejected against the ground truth, summed over the rounds where a method decided; FedLNS's screening
    diagnostics beside it."""
    lines = [
        "| Model | Partition | Malicious | Method | Runs | TPR | FPR | Precision | Active rounds | "
        "Wrong-cluster rounds | AUC of delta | One component | Singleton component |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (family, partition, fraction, method), runs in sorted(
        group_runs(main_runs(summaries), ("family", "partition", "fraction", "method")).items(),
        key=lambda item: (*setting_order(*item[0][:3]), METHODS.index(item[0][3])),
    ):
        if not runs[0]["selects_clients"] or method == "oracle":
            continue
        rates = detection_rates(**{k: sum(s[k] for s in runs) for k in ("tp", "fp", "fn", "tn")})
        screened = [s for s in runs if s["active_rounds"]]
        extra = ["–"] * 5
        if screened:
            aucs = [s["auc"] for s in screened if s["auc"] is not None]
            extra = [
                str(sum(s["active_rounds"] for s in screened)),
                str(sum(s["wrong_cluster_rounds"] for s in screened)),
                f"{np.mean(aucs):.3f}" if aucs else "–",
                str(sum(s["one_component_rounds"] for s in screened)),
                str(sum(s["singleton_rounds"] for s in screened)),
            ]
        lines.append(
            f"| {family_label(family, runs)} | {PARTITION_NAMES[partition]} | {percent_text(fraction)} | "
            f"{METHOD_NAMES[method]} | {len(runs)} | {_pct(rates['tpr'])} | {_pct(rates['fpr'])} | "
            f"{_pct(rates['precision'])} | " + " | ".join(extra) + " |"
        )
    return "\n".join(lines) + "\n"


def _pct(value):
    return "–" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def timing_markdown(summaries: list[dict]) -> str:
    """Wall time per run: client training, server aggregation, evaluation (Markdown, mean over runs)."""
    lines = [
        "| Model | Method | Runs | Rounds | Client training (s) | Server aggregation (s) | Evaluation (s) "
        "| Total (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (family, method), runs in sorted(
        group_runs(summaries, ("family", "method")).items(),
        key=lambda item: (FAMILIES.index(item[0][0]), METHODS.index(item[0][1])),
    ):
        parts = [np.mean([s[k] for s in runs]) for k in ("client_time_s", "server_time_s", "eval_time_s")]
        lines.append(
            f"| {family_label(family, runs)} | {METHOD_NAMES[method]} | {len(runs)} | "
            f"{np.mean([s['completed'] for s in runs]):.0f} | {parts[0]:.1f} | {parts[1]:.2f} | "
            f"{parts[2]:.1f} | {sum(parts):.0f} |"
        )
    return "\n".join(lines) + "\n"
