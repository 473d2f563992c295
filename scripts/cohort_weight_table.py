"""The cohort-weight study (``docs/results/cohort-weight``) as Markdown: ``FedLNS(cohort_weight="coherence")``
beside the default (``"unit"``) and FedAvg in each cell, and the plan's criteria, each met or missed.

Reads runs folders or results folders holding their archive (``scripts/results_cohort_weight.sh``); a run in more
than one folder is read from the first. With ``--seeds`` the criteria are those of the second plan
(``docs/results/cohort-weight/seeds/PLAN.md``, ``scripts/results_cohort_weight_seeds.sh``): two seeds per cell.

Usage: python scripts/cohort_weight_table.py [--seeds] STUDY [MORE ...]
"""

from __future__ import annotations

import sys

from cohort_vote_table import gather, rates, text, worse  # scripts/, beside this one
from lora_matrix_table import checklist, print_checks

from fedlns_sim.report.stats import detection_rates

AGAINST = ("weak_core", "sleeper", "side_join", "majority_only", "cut_blend")  # part A of the plan


def pooled(runs: list[dict], rate: str) -> float:
    totals = {k: sum(run[k] for run in runs) for k in ("tp", "fp", "fn", "tn")}
    return detection_rates(**totals)[rate]


def only(run: dict | None) -> str:
    return "-" if run is None else (", ".join(str(t) for t in run["attackers_only_rounds"]) or "none")


def add_tpr_checks(add, tc40: dict, test: str, unit: str, default: str = "unit", candidate: str = "coherence") -> None:
    """Per family, the candidate's pooled TPR at 40% target corruption at most 0.02 below the default's."""
    for family, runs in sorted(tc40.items()):
        before, after = pooled(runs[default], "tpr"), pooled(runs[candidate], "tpr")
        add(test, f"{family} ({len(runs[default])} {unit}): {after:.3f} against {before:.3f}", after >= before - 0.02)


def add_gap_checks(
    add,
    name: str,
    seeds: list,
    pairs: list[tuple[dict, dict]],
    averaged: str = "3. averaged over the seeds, at most 1% above the default",
    each: str = "3. every run at most 2% above the default's",
) -> None:
    """The candidate's runs against the default's (``pairs``) in one cell: averaged over the seeds at most 1% above
    (``averaged``), and every run at most 2% above (``each``)."""
    gap = mean_gap(pairs)
    add(averaged, f"{name}: {gap:+.1%}", gap <= 0.01)
    for seed, (ours, default) in zip(seeds, pairs):
        add(each, f"{name} seed {seed}: {worse(ours, default):+.1%}", worse(ours, default) <= 0.02)


def checks_of(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    checks, add = checklist()

    bert20: dict[str, list[dict]] = {"unit": [], "coherence": []}
    tc40: dict[str, dict[str, list[dict]]] = {}
    for key in sorted(cells):
        family, partition, fraction, attack, seed = key
        cell = cells[key]
        ours, default, fedavg = cell.get("coherence"), cell.get("unit"), cell.get("fedavg")
        name = f"{family} {partition} {fraction:.0%} {attack} seed {seed}"
        if ours is None:
            continue
        if default is None:
            add("every cell has the default's run beside the candidate's", f"{name}: missing", False)
            continue
        if attack in AGAINST:
            add(
                "4. against the attacks of A, at most 1% above the default",
                f"{name}: {worse(ours, default):+.1%}",
                worse(ours, default) <= 0.01,
            )
            if attack == "weak_core":
                met = fedavg is not None and worse(ours, fedavg) <= 0.01
                add(
                    "4. under weak_core, at most 1% above FedAvg",
                    f"{name}: " + ("no FedAvg run" if fedavg is None else f"{worse(ours, fedavg):+.1%}"),
                    met,
                )
            continue
        if fraction > 0:
            add(
                "1. no round of attackers only after activation",
                f"{name}: rounds {only(ours)}",
                not ours["attackers_only_rounds"],
            )
        add(
            "3. at most 1% above the default (best and last 10)",
            f"{name}: {worse(ours, default):+.1%}",
            worse(ours, default) <= 0.01,
        )
        if family == "bert" and fraction == 0.2:
            bert20["unit"].append(default)
            bert20["coherence"].append(ours)
        if fraction == 0.4 and attack == "target_corruption":
            for setting, run in (("unit", default), ("coherence", ours)):
                tc40.setdefault(family, {}).setdefault(setting, []).append(run)
    if bert20["unit"]:
        before, after = pooled(bert20["unit"], "fpr"), pooled(bert20["coherence"], "fpr")
        add(
            "2. honest rejections at BERT 20% at least halved (pooled FPR)",
            f"{len(bert20['unit'])} cells: {after:.3f} against {before:.3f}",
            after <= before / 2,
        )
    add_tpr_checks(add, tc40, "3. at 40% target corruption, pooled TPR at most 0.02 below the default's", "cells")
    return checks


def cell_groups(cells: dict) -> dict[tuple, list[tuple]]:
    """(family, partition, fraction, attack) -> the cells' keys at each seed, in sorted order."""
    groups: dict[tuple, list[tuple]] = {}
    for key in sorted(cells):
        groups.setdefault(key[:4], []).append(key)
    return dict(sorted(groups.items()))


def mean_gap(pairs: list[tuple[dict, dict]]) -> float:
    """How much worse the first runs are than the second on average (best and last 10, the worse of the two)."""
    return max(
        sum(a[k] for a, _ in pairs) / sum(b[k] for _, b in pairs) - 1 for k in ("perplexity", "last10_perplexity")
    )


def seeds_checks_of(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    """The second plan's criteria: cells of two seeds, read per cell (the seeds averaged) and per run."""
    checks, add = checklist()

    tc40: dict[str, dict[str, list[dict]]] = {}
    for group, keys in cell_groups(cells).items():
        family, partition, fraction, attack = group
        name = f"{family} {partition} {fraction:.0%} {attack}"
        pairs = [(cells[k].get("coherence"), cells[k].get("unit"), cells[k].get("fedavg"), k[4]) for k in keys]
        pairs = [p for p in pairs if p[0] is not None or p[1] is not None]
        if not pairs:
            continue
        missing = [f"seed {seed}" for ours, default, _, seed in pairs if ours is None or default is None]
        if missing or len(pairs) < 2:
            add(
                "every cell has both rules' runs at both seeds",
                f"{name}: missing {', '.join(missing) or 'a seed'}",
                False,
            )
            continue
        if attack == "weak_core":
            for ours, _, fedavg, seed in pairs:
                add(
                    "1. under weak_core, at most 1% above FedAvg (best and last 10)",
                    f"{name} seed {seed}: " + ("no FedAvg run" if fedavg is None else f"{worse(ours, fedavg):+.1%}"),
                    fedavg is not None and worse(ours, fedavg) <= 0.01,
                )
        for ours, default, _, seed in pairs:
            if fraction > 0:
                new = bool(ours["attackers_only_rounds"]) and not default["attackers_only_rounds"]
                add(
                    "2. no attackers-only round where the default has none",
                    f"{name} seed {seed}: candidate {only(ours)}, default {only(default)}",
                    not new,
                )
        if attack == "weak_core":
            continue
        add_gap_checks(add, name, [seed for *_, seed in pairs], [(ours, default) for ours, default, _, _ in pairs])
        for ours, default, _, _ in pairs:
            if fraction == 0.4 and attack == "target_corruption":
                tc40.setdefault(family, {}).setdefault("unit", []).append(default)
                tc40[family].setdefault("coherence", []).append(ours)
    add_tpr_checks(add, tc40, "4. at 40% target corruption, pooled TPR at most 0.02 below the default's", "runs")
    return checks


def print_rows(cells: dict, candidate: str, default: str, against: tuple[str, ...], extra=lambda cell: ()) -> None:
    """One Markdown row per cell that holds the candidate's run, the attacks ``against`` it first: FedAvg (clean
    FedAvg in a cell without attackers), the default and the candidate (best / last 10), their TPR / FPR and rounds
    of attackers only, then the columns ``extra(cell)`` gives."""
    for key in sorted(cells, key=lambda k: (k[3] not in against, k[2], k[0], k[1], k[3], k[4])):
        cell = cells[key]
        if candidate not in cell:
            continue
        columns = [text(cell.get("fedavg") or cell.get("clean")), *(text(cell.get(m)) for m in (default, candidate))]
        columns += [rates(cell.get(m)) for m in (default, candidate)] + [
            only(cell.get(m)) for m in (default, candidate)
        ]
        family, partition, fraction, attack, seed = key
        print(
            f"| {family} | {partition} | {fraction:.0%} | {attack} | {seed} | "
            + " | ".join([*columns, *extra(cell)])
            + " |"
        )


def print_study(
    intro: str,
    header: str,
    rule: str,
    cells: dict,
    candidate: str,
    against: tuple[str, ...],
    checks,
    extra=lambda cell: (),
) -> None:
    """A study's Markdown: ``intro``, the table (``header``, ``rule``, then :func:`print_rows` of ``candidate`` beside
    ``"default"``) and the plan's ``checks``."""
    print(intro + "\n")
    print(header)
    print(rule)
    print_rows(cells, candidate, "default", against, extra)
    print("\n## The plan's criteria\n")
    print_checks(checks)


def main(argv: list[str]) -> int:
    seeds = "--seeds" in argv
    argv = [a for a in argv if a != "--seeds"]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv, setting="cohort_weight", default="unit")
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR; the rounds that kept attackers only.\n")
    print(
        "| family | partition | malicious | attack | seed | FedAvg | default | coherence | TPR / FPR default "
        "| coherence | attackers only: default | coherence |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|")
    print_rows(cells, "coherence", "unit", AGAINST)
    print("\n## The plan's criteria\n")
    print_checks(seeds_checks_of(cells) if seeds else checks_of(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
