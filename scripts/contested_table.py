"""The contested study (``docs/results/contested``) as Markdown: ``FedLNS(cohort_weight="agreeing",
cohort_undecided="hold_contested")`` beside ``FedLNS()`` and FedAvg in each cell, and the plan's criteria, each met or
missed.

Reads the study's runs (``scripts/results_contested.sh``) and, for the plan's known cases (G), the folders holding the
default's and FedAvg's runs of those cells (``docs/results/cohort-agree``, its ``seeds``, and
``docs/results/cohort-weight/seeds``): runs folders or results folders holding their archive; a run in more than one
folder is read from the first. Runs of other settings of the rule are left out.

With ``--hold`` the candidate is the second plan's (``docs/results/contested/hold/PLAN.md``,
``cohort_undecided="hold"``), read with the same criteria.

Usage: python scripts/contested_table.py [--hold] STUDY [MORE ...]
"""

from __future__ import annotations

import sys

from cohort_vote_table import gather as gather_runs  # scripts/, beside this one
from cohort_vote_table import detects, rates, text, worse
from cohort_weight_table import only
from lora_matrix_table import checklist, print_checks


OURS = "fedlns_default"
AGAINST = ("weak_core", "majority_only", "majority_weak")  # the plan's A-C
KNOWN = {("bert", "iid", 0.4, "weak_core", 400), ("gpt", "iid", 0.4, "majority_only", 700)}  # the plan's G


def gather(sources: list[str], undecided: str = "hold_contested") -> dict:
    """(preset, family, partition, fraction, attack, seed) -> {"fedavg" | "clean" | "default" | "candidate": run};
    preset is "lora" (adapter payloads) or "cpu"; the candidate is ``cohort_weight="agreeing"`` with ``undecided``,
    the default ``FedLNS()`` as it ships (``"unit"``, ``"support"``)."""
    studied = {("unit", "support"), ("agreeing", undecided)}

    def keep(run: dict) -> bool:
        weight, rule = run["config"].get("cohort_weight", "unit"), run["config"].get("cohort_undecided", "support")
        return run["method"] != OURS or (weight, rule) in studied

    def preset(source: str, run: dict) -> str:
        return "lora" if run["config"].get("peft") == "lora" else "cpu"

    cells = gather_runs(sources, setting="cohort_undecided", default="support", group=preset, keep=keep)
    names = {"support": "default", undecided: "candidate"}  # what the kept runs of FedLNS() are told apart by
    return {key: {names.get(method, method): run for method, run in cell.items()} for key, cell in cells.items()}


def attack_checks(add, test: str, name: str, ours: dict, fedavg: dict | None) -> None:
    """Criterion 1 of a cell under an attack written against the candidate: no round of attackers only, at most 1%
    above FedAvg."""
    add(f"{test}, no round of attackers only", f"{name}: rounds {only(ours)}", not ours["attackers_only_rounds"])
    gap = "no FedAvg run" if fedavg is None else f"{worse(ours, fedavg):+.1%}"
    add(f"{test}, at most 1% above FedAvg", f"{name}: {gap}", fedavg is not None and worse(ours, fedavg) <= 0.01)


def default_checks(add, name: str, cell: dict, lora_target_corruption: bool, fraction: float) -> None:
    """Criteria 2 (LoRA target corruption: the detection targets, within 1% of the default) and 3 (elsewhere: within
    1% of the default, no new round of attackers only) of a cell's candidate run."""
    ours, default = cell["candidate"], cell.get("default")
    if default is None:
        add("every cell has the default's run", f"{name}: missing", False)
        return
    if lora_target_corruption:
        add(
            "2. target corruption: TPR >= 0.95 and FPR <= 0.05",
            f"{name}: {rates(ours)}",
            detects(ours),
        )
        add(
            "2. target corruption: at most 1% above the default",
            f"{name}: {worse(ours, default):+.1%}",
            worse(ours, default) <= 0.01,
        )
        return
    add(
        "3. no regression: at most 1% above the default",
        f"{name}: {worse(ours, default):+.1%}",
        worse(ours, default) <= 0.01,
    )
    if fraction > 0:
        add(
            "3. no regression: no round of attackers only where the default has none",
            f"{name}: candidate {only(ours)}, default {only(default)}",
            not (ours["attackers_only_rounds"] and not default["attackers_only_rounds"]),
        )


def checks_of(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    checks, add = checklist()
    for key in sorted(cells):
        preset, family, partition, fraction, attack, seed = key
        cell = cells[key]
        name = f"{preset} {family} {partition} {fraction:.0%} {attack} seed {seed}"
        if cell.get("candidate") is None or key[1:] in KNOWN:
            continue
        if preset == "lora" and attack in AGAINST:
            attack_checks(
                add, "1. under weak_core, majority_only and majority_weak", name, cell["candidate"], cell.get("fedavg")
            )
        else:
            default_checks(add, name, cell, preset == "lora" and attack == "target_corruption", fraction)
    return checks


def main(argv: list[str]) -> int:
    undecided = "hold" if "--hold" in argv else "hold_contested"
    argv = [a for a in argv if a != "--hold"]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv, undecided)
    print("Best checkpoint / last 10 rounds' perplexity (FedAvg: clean FedAvg in the rows without attackers); TPR /")
    print(
        "FPR; the rounds that kept attackers only. G: the plan's known cases (default and FedAvg from cohort-agree).\n"
    )
    print(
        "| preset | family | partition | malicious | attack | seed | FedAvg | default | candidate | TPR / FPR default "
        "| candidate | attackers only: default | candidate |"
    )
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|")
    for key in sorted(cells, key=lambda k: (k[0] != "lora", k[4] not in AGAINST, k[1:] in KNOWN, k[4], k[1], k[5])):
        cell = cells[key]
        if "candidate" not in cell:
            continue
        preset, family, partition, fraction, attack, seed = key
        columns = [text(cell.get("fedavg") or cell.get("clean")), text(cell.get("default")), text(cell["candidate"])]
        columns += [
            rates(cell.get("default")),
            rates(cell["candidate"]),
            only(cell.get("default")),
            only(cell["candidate"]),
        ]
        mark = " (G)" if key[1:] in KNOWN else ""
        print(
            f"| {preset} | {family} | {partition} | {fraction:.0%} | {attack}{mark} | {seed} | "
            + " | ".join(columns)
            + " |"
        )
    print("\n## The plan's criteria\n")
    print_checks(dict(sorted(checks_of(cells).items())))  # by criterion
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
