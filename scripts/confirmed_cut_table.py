"""The confirmed-cut study (``docs/results/confirmed-cut``) as Markdown: ``FedLNS(cohort_cut="confirmed")`` beside
the default (``cohort_cut="tree"``), FedAvg, clean FedAvg and the oracle in each cell, and the criteria of its
``PLAN.md``, each met or missed. Written while the variant was opt-in: "the default" here is the tree's cut, the rule
``FedLNS()`` had before the study made ``"confirmed"`` its default.

Reads runs folders or results folders holding their archive (``scripts/results_confirmed_cut.sh``), one per step,
named after it (``quick``, ``lora``, ``cpu``, ``lora-matrix``, ``cohort``, ``lora-matrix-bert``, ``side-join``: the
rows' first column); a run in more than one is read from the first.

Usage: python scripts/confirmed_cut_table.py RUNS [RUNS ...]
       python scripts/confirmed_cut_table.py --fired RUNS   # the cells whose default to re-run, as sweep options

A cell whose variant run never fired its confirmed cut (no client rejected with its reason) and has no default run
beside it is the default's run by the code (``tests/test_cohort.py``): the table shows the variant's numbers in both
columns, marked ``=``, and the criteria count it as equal.
"""

from __future__ import annotations

import sys

from cohort_vote_table import by_folder, gather, rates, text, worse  # scripts/, beside this one
from fedlns_sim.config import CUT_ATTACKS
from fedlns_sim.report.stats import detection_rates
from lora_matrix_table import print_checks

CUTS = ("tree", "confirmed")  # the default's cut, the variant's
LABELS = {
    "lora-matrix": "(d) lora-matrix",
    "cohort": "(e) cohort's matrix",
    "lora-matrix-bert": "(e) lora-matrix BERT",
    "side-join": "(f) side_join",
}
ADAPTIVE = CUT_ATTACKS  # attacks that change with the setting: the default always runs beside


def fired(folder: str) -> list[str]:
    """Sweep options of the cells of ``folder`` whose variant fired its confirmed cut or met an attack that changes
    with the setting (``ADAPTIVE``), where the default has not run."""
    cells = gather([folder], "cohort_cut", "tree")
    lines = []
    for (family, partition, fraction, attack, seed), cell in sorted(cells.items()):
        ours = cell.get("confirmed")
        if ours is None or "tree" in cell or not (ours["confirmed_cut_rounds"] or attack in ADAPTIVE):
            continue
        lines.append(
            f"--families {family} --partitions {partition} --fractions {fraction:g} --seeds {seed}"
            + ("" if fraction == 0 else f" --attacks {attack}")
        )
    return lines


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
            (
                f"{name}: {ours['perplexity']:.1f} against {default['perplexity']:.1f}",
                ours["perplexity"] <= default["perplexity"],
            )
        )
    elif preset in ("quick", "cpu"):
        checks.setdefault("(b) full-model GPT and LLaMA: within 1% of the default", []).append(
            (f"{name}: {worse(ours, default):+.1%}", worse(ours, default) <= 0.01)
        )
    else:  # (c) of the plan's first LoRA cells, (d) of its third and fourth follow-ups, (e) and (f) of the others
        label = LABELS.get(preset, "(c) LoRA GPT")
        checks.setdefault(f"{label}: within 1% of the default", []).append(
            (f"{name}: {worse(ours, default):+.1%}", worse(ours, default) <= 0.01)
        )
        fpr = [detection_rates(run["tp"], run["fp"], run["fn"], run["tn"])["fpr"] for run in (ours, default)]
        checks.setdefault(f"{label}: FPR at most 0.02 above the default's", []).append(
            (f"{name}: {fpr[0]:.3f} against {fpr[1]:.3f}", fpr[0] <= fpr[1] + 0.02)
        )
        if preset in LABELS:
            only = [run["attackers_only_rounds"] for run in (ours, default)]
            checks.setdefault(f"{label}: no attackers-only round where the default has none", []).append(
                (f"{name}: {only[0] or '-'} against {only[1] or '-'}", not only[0] or bool(only[1]))
            )


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "--fired":
        for line in (line for folder in argv[1:] for line in fired(folder)):
            print(line)
        return 0
    cells = gather(argv, "cohort_cut", "tree", group=by_folder)
    for key, cell in cells.items():  # the variant never fired and no default ran: the default's run by the code
        ours = cell.get("confirmed")
        if ours and "tree" not in cell and key[4] not in ADAPTIVE and not ours["confirmed_cut_rounds"]:
            cell["tree"] = {**ours, "same": True}
    print(
        "Best checkpoint / last 10 rounds' perplexity; TPR / FPR; attackers-only rounds after activation. `=`: the "
        "variant never fired its cut and the default did not run beside it (its run is the variant's, by the code)."
        "\n"
    )
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
            + " | ".join(("= " if cell.get(m, {}).get("same") else "") + text(cell.get(m)) for m in ("fedavg", *CUTS))
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
