"""The confirmed-cut study (``docs/results/confirmed-cut``) as Markdown: ``FedLNS(cohort_cut="confirmed")`` beside
the default (``cohort_cut="tree"``), FedAvg, clean FedAvg and the oracle in each cell, and the criteria of its
``PLAN.md``, each met or missed.

Reads runs folders or results folders holding their archive (``scripts/results_confirmed_cut.sh``), one per step,
named after it (``quick``, ``lora``, ``cpu``, ``lora-matrix``: the rows' first column); a run in more than one is
read from the first.

Usage: python scripts/confirmed_cut_table.py RUNS [RUNS ...]
"""

from __future__ import annotations

import sys

from cohort_vote_table import gather, rates, text, worse  # scripts/, beside this one
from fedlns_sim.report.stats import detection_rates
from lora_matrix_table import print_checks

CUTS = ("tree", "confirmed")  # the default's cut, the variant's


def check(checks: dict, key: tuple, cell: dict) -> None:
    """The plan's criteria on one cell (added to ``checks``: criterion -> [(text, met)])."""
    preset, family, partition, fraction, attack, seed = key
    ours, default = cell.get("confirmed"), cell.get("tree")
    if ours is None or default is None:
        return
    name = f"{preset} {family} {partition} {fraction:.0%} {attack} seed {seed}"
    if preset in ("quick", "cpu") and family == "bert":
        tpr = detection_rates(ours["tp"], ours["fp"], ours["fn"], ours["tn"])["tpr"]
        checks.setdefault("(a) full-model BERT: TPR at least 0.9", []).append((f"{name}: {tpr:.2f}", tpr >= 0.9))
        checks.setdefault("(a) full-model BERT: best checkpoint no higher than the default's", []).append(
            (f"{name}: {ours['perplexity']:.1f} against {default['perplexity']:.1f}",
             ours["perplexity"] <= default["perplexity"])
        )
    elif preset in ("quick", "cpu"):
        checks.setdefault("(b) full-model GPT and LLaMA: within 1% of the default", []).append(
            (f"{name}: {worse(ours, default):+.1%}", worse(ours, default) <= 0.01)
        )
    else:  # the LoRA cells: (c) of the plan's first cells, (d) of its third and fourth follow-ups
        label = "(d) lora-matrix" if preset == "lora-matrix" else "(c) LoRA GPT"
        checks.setdefault(f"{label}: within 1% of the default", []).append(
            (f"{name}: {worse(ours, default):+.1%}", worse(ours, default) <= 0.01)
        )
        fpr = [detection_rates(run["tp"], run["fp"], run["fn"], run["tn"])["fpr"] for run in (ours, default)]
        checks.setdefault(f"{label}: FPR at most 0.02 above the default's", []).append(
            (f"{name}: {fpr[0]:.3f} against {fpr[1]:.3f}", fpr[0] <= fpr[1] + 0.02)
        )
        if preset == "lora-matrix":
            only = [run["attackers_only_rounds"] for run in (ours, default)]
            checks.setdefault(f"{label}: no attackers-only round where the default has none", []).append(
                (f"{name}: {only[0] or '-'} against {only[1] or '-'}", not only[0] or bool(only[1]))
            )

def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv, "cohort_cut", "tree", by_folder=True)
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR; attackers-only rounds after activation.\n")
    print(
        "| preset | family | partition | malicious | attack | seed | clean | oracle | FedAvg | default (tree) "
        "| confirmed | TPR / FPR tree | confirmed | attackers-only rounds tree / confirmed |"
    )
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    checks: dict[str, list[tuple[str, bool]]] = {}
    for key in sorted(cells, key=lambda k: (k[0], k[3], k[1], k[2], k[4], k[5])):
        preset, family, partition, fraction, attack, seed = key
        cell = cells[key]
        if not any(cut in cell for cut in CUTS):
            continue
        clean = cells.get((preset, family, partition, 0.0, "-", seed), {}).get("clean")
        oracle = cells.get((preset, family, partition, fraction, "-", seed), {}).get("oracle")
        only = " / ".join(str(cell[cut]["attackers_only_rounds"] or "-") if cut in cell else "-" for cut in CUTS)
        print(
            f"| {preset} | {family} | {partition} | {fraction:.0%} | {attack} | {seed} | {text(clean)} | "
            f"{text(oracle)} | "
            + " | ".join(text(cell.get(m)) for m in ("fedavg", *CUTS))
            + " | "
            + " | ".join(rates(cell.get(m)) for m in CUTS)
            + f" | {only} |"
        )
        check(checks, key, cell)
    print("\n## The plan's criteria\n")
    print_checks(dict(sorted(checks.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
