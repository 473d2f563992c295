"""The studies of open rounds as Markdown: ``FedLNS(cohort_contested="reject")`` (``docs/results/contested-reject``)
or, with ``--strong-minority``, ``FedLNS(cohort_strong_minority="reject")`` (``docs/results/strong-minority``), or
with ``--open-keep``, ``FedLNS(cohort_open="keep")`` (``docs/results/open-keep``, whose ``FedLNS()`` and FedAvg runs
are partly the other two folders'), beside ``FedLNS()`` as it ships and FedAvg in each cell, and the plan's criteria,
each met or missed. Every run these studies compare was made on one processor.

With ``--shipped``, ``FedLNS()`` as it ships beside FedAvg in each cell (``docs/results/strong-minority/shipped``:
``minority_flip`` at more seeds).

Usage: python scripts/contested_reject_table.py [--strong-minority | --open-keep | --shipped] STUDY [MORE...]
"""

from __future__ import annotations

import sys
from functools import partial

from cohort_vote_table import gather, rates, text, worse  # scripts/, beside this one
from cohort_weight_table import only
from lora_matrix_table import checklist, print_checks
from placed_vote_table import SHIPPED, rejected, rows

#: Per study: the setting it changes, its value in FedLNS() as it ships and in the candidate, and the header's line
#: under the table.
STUDIES: dict[str, tuple[str, str, str]] = {
    "cohort_contested": (
        "hold",
        "reject",
        'FedLNS(): as\nit ships (a contested round held); {1}: `FedLNS(cohort_contested="reject")`.',
    ),
    "cohort_strong_minority": (
        "support",
        "reject",
        "FedLNS(): as\nit ships (a strong minority part of an open round left to the support rule); {1}:\n"
        '`FedLNS(cohort_strong_minority="reject")`.',
    ),
    "cohort_open": (
        "support",
        "keep",
        "FedLNS(): as\nit ships (an open round that is not contested left to the support rule); {1}:\n"
        '`FedLNS(cohort_open="keep")`.',
    ),
}
#: The command line's study options (none: cohort_contested); --shipped reads FedLNS() beside FedAvg.
OPTIONS = {
    "--strong-minority": "cohort_strong_minority",
    "--open-keep": "cohort_open",
    "--shipped": "cohort_strong_minority",
}


def shipped(run: dict, setting: str = "cohort_contested") -> bool:
    """FedAvg, clean FedAvg, and FedLNS() with today's defaults but for ``setting``."""
    config = run["config"]
    settled = config.get("cohort_vote") == "settled" and all(config.get(k) == v for k, v in SHIPPED.items())
    others = all(config.get(k, base) == base for k, (base, _, _) in STUDIES.items() if k != setting)
    return run["method"] != "fedlns_default" or (settled and others and config.get("cohort_margin", 0.0) == 0.0)


def table(cells: dict, setting: str) -> dict[str, list[tuple[str, bool]]]:
    """The plan's four criteria: the every-plan two, then ``agree_blend``'s cells within 1% of FedAvg
    (``cohort_contested``) or no round of attackers only under ALIE (the others), and the honest updates rejected
    without attackers."""
    checks, add = checklist()
    base, value, intro = STUDIES[setting]
    honest = {base: [0, 0], value: [0, 0]}  # criterion 4: honest updates rejected, of all, without attackers
    within = {base: 0, value: 0}  # cohort_contested's criterion 3: agree_blend cells within 1% of FedAvg
    names = ("FedLNS()", value)
    for name, key, ours, default, fedavg in rows(
        cells, add, ("1", "2"), vote=value, need_fedavg=False, base=base, names=names, intro=intro
    ):
        fraction, attack = key[2], key[3]
        if fraction == 0:
            for label, run in ((base, default), (value, ours)):
                rejected(honest, label, run)
        if setting == "cohort_contested" and attack == "agree_blend" and fedavg is not None:
            for label, run in ((base, default), (value, ours)):
                within[label] += worse(run, fedavg) <= 0.01
        if setting != "cohort_contested" and attack == "alie":
            only = ours["attackers_only_rounds"]
            add("3. ALIE at 20%: no round of attackers only", f"{name}: {only or 'none'}", not only)
    if setting == "cohort_contested":
        add(
            "3. agree_blend at 40%: within 1% of FedAvg (best checkpoint and last 10 rounds) in more cells than FedLNS()",
            f"{value} {within[value]}, FedLNS() {within[base]}",
            within[value] > within[base],
        )
    (fp_base, all_base), (fp, total) = honest[base], honest[value]
    add(
        "4. without attackers: no more honest updates rejected than FedLNS()",
        f"{value} {fp} of {total}, FedLNS() {fp_base} of {all_base}",
        fp <= fp_base,
    )
    return checks


def against_fedavg(cells: dict) -> None:
    """``FedLNS()`` as it ships beside FedAvg, one row per cell that has both."""
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR; the rounds that kept attackers only.\n")
    print(
        "| seed | family | partition | malicious | attack | FedAvg | FedLNS() | vs FedAvg | TPR / FPR | attackers only |"
    )
    print("|---:|---|---|---:|---|---:|---:|---:|---:|---|")
    for key in sorted(cells, key=lambda k: (k[4], k[0], k[1], -k[2], k[3])):
        family, partition, fraction, attack, seed = key
        ours, fedavg = cells[key].get("support"), cells[key].get("fedavg")
        if ours is None or fedavg is None:
            continue
        print(
            f"| {seed} | {family} | {partition} | {fraction:.0%} | {attack} | {text(fedavg)} | {text(ours)} | "
            f"{worse(ours, fedavg):+.1%} | {rates(ours)} | {only(ours)} |"
        )


def main(argv: list[str]) -> int:
    option = argv[0] if argv and argv[0] in OPTIONS else None
    setting = OPTIONS.get(option or "", "cohort_contested")
    argv = argv[1:] if option else argv
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv, setting=setting, default=STUDIES[setting][0], keep=partial(shipped, setting=setting))
    if option == "--shipped":
        against_fedavg(cells)
        return 0
    checks = table(cells, setting)
    print("\n## The plan's criteria\n")
    print_checks(dict(sorted(checks.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
