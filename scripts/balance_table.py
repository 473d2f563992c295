"""The balance study (``docs/results/balance`` and its ``followup``) as Markdown: ``FedLNS(cohort_balance=0.8,
cohort_open="keep")`` beside ``FedLNS()`` as it ships and FedAvg in each cell (the LoRA scenario's and the ``cpu``
preset's), and the plan's criteria, each met or missed. ``FedLNS()``'s and FedAvg's runs are partly other folders' (all
made on one processor).

Usage: python scripts/balance_table.py STUDY [MORE...]
"""

from __future__ import annotations

import sys

from cohort_vote_table import detects, gather, rates, text, worse  # scripts/, beside this one
from cohort_weight_table import only
from contested_reject_table import shipped
from lora_matrix_table import checklist, print_checks
from placed_vote_table import rejected

#: The candidate: cohort_balance and cohort_open as it sets them (FedLNS() as it ships: 0.0 and "support").
CANDIDATE = {"cohort_balance": 0.8, "cohort_open": "keep"}
#: The plan's groups of attacks: measured against FedAvg (B1, B2), or against FedLNS() (B4, B5).
AGAINST_FEDAVG = ("minority_flip", "victim_flip")
AGAINST_SHIPPED = ("alie", "agree_blend", "contest_flip", "weak_core")
#: Measured after the verdict (``PART=majority``): the attacks that hold rounds, against FedLNS().
HOLDING = ("majority_only", "majority_weak", "majority_drift")


def studied(run: dict) -> bool:
    """FedAvg, FedLNS() as it ships, and the candidate (FedLNS() as it ships but for ``CANDIDATE``)."""
    config = run["config"]
    open_round = {0.0: "support", CANDIDATE["cohort_balance"]: CANDIDATE["cohort_open"]}  # per cohort_balance
    balance = config.get("cohort_balance", 0.0)  # runs made before the setting existed: 0
    return shipped(run, "cohort_open") and config.get("cohort_open", "support") == open_round.get(balance)


def preset(source: str, run: dict) -> str:
    """:func:`gather`'s ``group``: ``lora`` for the LoRA scenario's runs (adapter payloads), ``cpu`` for a model
    trained whole."""
    return "lora" if run["config"].get("peft") else "cpu"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv, setting="cohort_balance", default=0.0, keep=studied, group=preset)
    checks, add = checklist()
    honest = {"FedLNS()": [0, 0], "candidate": [0, 0]}
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR; the rounds that kept attackers only (after")
    print('activation). FedLNS(): as it ships; candidate: `FedLNS(cohort_balance=0.8, cohort_open="keep")`.\n')
    print(
        "| preset | seed | family | partition | malicious | attack | FedAvg | FedLNS() | candidate | candidate vs FedAvg | "
        "vs FedLNS() | TPR / FPR FedLNS() | candidate | attackers only FedLNS() | candidate |"
    )
    print("|---|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for key in sorted(cells, key=lambda k: (k[0] != "lora", k[4], k[1], k[2], -k[3], k[5])):
        scenario, family, partition, fraction, attack, seed = key
        ours, default = cells[key].get(CANDIDATE["cohort_balance"]), cells[key].get(0.0)
        fedavg = cells[key].get("fedavg") or cells[key].get("clean")
        if ours is None:
            continue
        name = f"{scenario} {family} {partition} {fraction:.0%} {attack} seed {seed}"
        print(
            f"| {scenario} | {seed} | {family} | {partition} | {fraction:.0%} | {attack} | {text(fedavg)} | {text(default)} | "
            f"{text(ours)} | {'-' if fedavg is None else f'{worse(ours, fedavg):+.1%}'} | "
            f"{'-' if default is None else f'{worse(ours, default):+.1%}'} | {rates(default)} | {rates(ours)} | "
            f"{only(default)} | {only(ours)} |"
        )
        if scenario == "cpu":
            add(
                "4. the cpu preset: within 1% of FedLNS()",
                f"{name}: {'FedLNS() missing' if default is None else f'{worse(ours, default):+.1%}'}",
                default is not None and worse(ours, default) <= 0.01,
            )
            continue
        if attack in AGAINST_FEDAVG:
            missing = fedavg is None
            add(
                "1. minority_flip and victim_flip at 40%: within 1% of FedAvg",
                f"{name}: {'FedAvg missing' if missing else f'{worse(ours, fedavg):+.1%}'}",
                not missing and worse(ours, fedavg) <= 0.01,
            )
            continue
        if default is None:
            add("FedLNS()'s run of every cell", f"{name}: missing", False)
            continue
        if attack == "target_corruption":
            add(
                "2. target corruption: TPR >= 0.95, FPR <= 0.05, within 1% of FedLNS()",
                f"{name}: {rates(ours)}, {worse(ours, default):+.1%}",
                detects(ours) and worse(ours, default) <= 0.01,
            )
        elif fraction == 0:
            rejected(honest, "FedLNS()", default)
            rejected(honest, "candidate", ours)
        elif attack in HOLDING:
            add(
                "after the verdict: majority_only, majority_weak, majority_drift within 1% of FedLNS()",
                f"{name}: {worse(ours, default):+.1%}",
                worse(ours, default) <= 0.01,
            )
        elif attack in AGAINST_SHIPPED:
            new_only = ours["attackers_only_rounds"] and not default["attackers_only_rounds"]
            add(
                "3. ALIE, agree_blend, contest_flip, weak_core: within 1% of FedLNS(), no round of attackers only "
                "where it has none",
                f"{name}: {worse(ours, default):+.1%}, attackers only: {only(ours)}",
                worse(ours, default) <= 0.01 and not new_only,
            )
    (fp_base, all_base), (fp, total) = honest["FedLNS()"], honest["candidate"]
    if total or all_base:  # cells without attackers were read
        add(
            "2. without attackers: no more honest updates rejected than FedLNS()",
            f"candidate {fp} of {total}, FedLNS() {fp_base} of {all_base}",
            fp <= fp_base,
        )
    print("\n## The plan's criteria\n")
    print_checks(dict(sorted(checks.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
