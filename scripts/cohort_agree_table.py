"""The cohort-agree study (``docs/results/cohort-agree``) as Markdown: ``FedLNS(cohort_weight="agreeing")`` beside
``FedLNS()`` and FedAvg in each cell, and the plan's criteria, each met or missed.

Reads the study's runs (``scripts/results_cohort_agree.sh``) and cohort-weight/seeds' (the default's and FedAvg's at
seeds 400 and 500): runs folders or results folders holding their archive; a run in more than one folder is read from
the first. Runs of ``cohort_weight="coherence"`` and of a quorum are left out.

With ``--seeds`` the criteria are those of the second plan (``docs/results/cohort-agree/seeds/PLAN.md``, seeds 600
and 700: is the candidate the better default).

Usage: python scripts/cohort_agree_table.py [--seeds] STUDY [MORE ...]
"""

from __future__ import annotations

import sys

from cohort_vote_table import gather as gather_runs  # scripts/, beside this one
from cohort_vote_table import worse
from cohort_weight_table import add_gap_checks, add_tpr_checks, cell_groups, only, print_study
from lora_matrix_table import checklist

OURS = "fedlns_default"
AGAINST = ("weak_core", "agree_blend")  # part A of the plan


def gather(sources: list[str]) -> dict:
    """(family, partition, fraction, attack, seed) -> {"fedavg" | "clean" | "default" | "agreeing": run}."""

    def studied(run: dict) -> bool:
        return run["method"] != OURS or (
            run["config"].get("cohort_weight", "unit") in ("unit", "agreeing") and not run["config"].get("quorum")
        )

    cells = gather_runs(sources, setting="cohort_weight", default="unit", keep=studied)
    return {key: {"default" if m == "unit" else m: run for m, run in cell.items()} for key, cell in cells.items()}


def paired_cells(cells: dict, add):
    """Per cell: its (family, partition, fraction, attack), its name and its runs, (candidate, default, FedAvg or
    None, seed) per seed; a cell without both rules' runs at two seeds is reported missing and left out."""
    for group, all_keys in cell_groups(cells).items():
        family, partition, fraction, attack = group
        name = f"{family} {partition} {fraction:.0%} {attack}"
        keys = [key for key in all_keys if "agreeing" in cells[key] or "default" in cells[key]]
        missing = [f"seed {k[4]}" for k in keys if not {"agreeing", "default"} <= set(cells[k])]
        if not keys or missing or len(keys) < 2:
            add(
                "every cell has both rules' runs at both seeds",
                f"{name}: missing {', '.join(missing) or 'a seed'}",
                False,
            )
            continue
        yield group, name, [(cells[k]["agreeing"], cells[k]["default"], cells[k].get("fedavg"), k[4]) for k in keys]


def add_fedavg_checks(add, test: str, name: str, runs: list) -> None:
    """Each candidate run at most 1% above FedAvg's (best and last 10)."""
    for ours, _, fedavg, seed in runs:
        add(
            test,
            f"{name} seed {seed}: " + ("no FedAvg run" if fedavg is None else f"{worse(ours, fedavg):+.1%}"),
            fedavg is not None and worse(ours, fedavg) <= 0.01,
        )


def add_regression_checks(add, fraction: float, name: str, runs: list) -> None:
    """Criteria 2 and 3 of both plans: no attackers-only round where the default has none; at most 1% above the
    default averaged over the seeds and 2% per run."""
    for ours, default, _, seed in runs:
        if fraction > 0:
            add(
                "2. no attackers-only round where the default has none",
                f"{name} seed {seed}: candidate {only(ours)}, default {only(default)}",
                not (ours["attackers_only_rounds"] and not default["attackers_only_rounds"]),
            )
    add_gap_checks(add, name, [seed for *_, seed in runs], [(ours, default) for ours, default, _, _ in runs])


def checks_of(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    checks, add = checklist()
    tc40: dict[str, dict[str, list[dict]]] = {}
    for (family, _, fraction, attack), name, runs in paired_cells(cells, add):
        if attack in AGAINST:
            for ours, _, _, seed in runs:
                add(
                    "1. under weak_core and agree_blend, no round of attackers only",
                    f"{name} seed {seed}: rounds {only(ours)}",
                    not ours["attackers_only_rounds"],
                )
            add_fedavg_checks(
                add, "1. under weak_core and agree_blend, at most 1% above FedAvg (best and last 10)", name, runs
            )
            continue
        add_regression_checks(add, fraction, name, runs)
        if fraction == 0.4 and attack == "target_corruption":
            tc40[family] = {"default": [run[1] for run in runs], "agreeing": [run[0] for run in runs]}
    add_tpr_checks(
        add,
        tc40,
        "4. at 40% target corruption, pooled TPR at most 0.02 below the default's",
        "runs",
        default="default",
        candidate="agreeing",
    )
    return checks


def seeds_checks_of(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    """The second plan's criteria: under weak_core at most 1% above FedAvg and no more rounds of attackers only than
    the default; elsewhere no new lock-in and no regression."""
    checks, add = checklist()
    for (_, _, fraction, attack), name, runs in paired_cells(cells, add):
        if attack == "weak_core":
            add_fedavg_checks(add, "1. under weak_core, at most 1% above FedAvg (best and last 10)", name, runs)
            for ours, default, _, seed in runs:
                add(
                    "1. under weak_core, no more rounds of attackers only than the default",
                    f"{name} seed {seed}: candidate {only(ours)}, default {only(default)}",
                    len(ours["attackers_only_rounds"]) <= len(default["attackers_only_rounds"]),
                )
            continue
        add_regression_checks(add, fraction, name, runs)
    return checks


def main(argv: list[str]) -> int:
    seeds = "--seeds" in argv
    argv = [a for a in argv if a != "--seeds"]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv)
    print_study(
        "Best checkpoint / last 10 rounds' perplexity (FedAvg: clean FedAvg in the rows without attackers); TPR /\n"
        "FPR; the rounds that kept attackers only.",
        "| family | partition | malicious | attack | seed | FedAvg | default | agreeing | TPR / FPR default | agreeing "
        "| attackers only: default | agreeing |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
        cells,
        "agreeing",
        AGAINST,
        seeds_checks_of(cells) if seeds else checks_of(cells),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
