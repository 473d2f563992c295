"""The contested-round study (``docs/results/contested-reject``) as Markdown: ``FedLNS(cohort_contested="reject")``
beside ``FedLNS()`` as it ships (a contested round held) and FedAvg in each cell, and the plan's criteria, each met or
missed. Every run the study compares is in its own folder (made on one processor).

With ``--followup``, the plan's follow-up (BERT and the ``cpu`` preset): its two every-plan criteria.

Usage: python scripts/contested_reject_table.py [--followup] STUDY [MORE...]
"""

from __future__ import annotations

import sys

from cohort_vote_table import gather, worse  # scripts/, beside this one
from lora_matrix_table import checklist, print_checks
from placed_vote_table import SHIPPED, rejected, rows

INTRO = 'FedLNS(): as\nit ships (a contested round held); {1}: `FedLNS(cohort_contested="reject")`.'


def shipped(run: dict) -> bool:
    """FedAvg, clean FedAvg, and FedLNS() with today's defaults but for ``cohort_contested``."""
    config = run["config"]
    settled = config.get("cohort_vote") == "settled" and all(config.get(k) == v for k, v in SHIPPED.items())
    return run["method"] != "fedlns_default" or (settled and config.get("cohort_margin", 0.0) == 0.0)


def table(cells: dict, followup: bool = False) -> dict[str, list[tuple[str, bool]]]:
    """The plan's four criteria (with ``followup``, the follow-up's two: its every-plan criteria)."""
    checks, add = checklist()
    honest = {"hold": [0, 0], "reject": [0, 0]}  # criterion 4: honest updates rejected, of all, without attackers
    within = {"hold": 0, "reject": 0}  # criterion 3: agree_blend cells within 1% of FedAvg
    names = ("FedLNS()", "reject")
    for name, key, ours, default, fedavg in rows(
        cells, add, ("1", "2"), vote="reject", need_fedavg=False, base="hold", names=names, intro=INTRO
    ):
        fraction, attack = key[2], key[3]
        if fraction == 0:
            for contested, run in (("hold", default), ("reject", ours)):
                rejected(honest, contested, run)
        if attack == "agree_blend" and fedavg is not None and not followup:
            for contested, run in (("hold", default), ("reject", ours)):
                within[contested] += worse(run, fedavg) <= 0.01
    if followup:
        return checks
    add(
        "3. agree_blend at 40%: within 1% of FedAvg (best checkpoint and last 10 rounds) in more cells than FedLNS()",
        f"reject {within['reject']}, FedLNS() {within['hold']}",
        within["reject"] > within["hold"],
    )
    (fp_hold, all_hold), (fp, total) = honest["hold"], honest["reject"]
    add(
        "4. without attackers: no more honest updates rejected than FedLNS()",
        f"reject {fp} of {total}, FedLNS() {fp_hold} of {all_hold}",
        fp <= fp_hold,
    )
    return checks


def main(argv: list[str]) -> int:
    followup = argv[:1] == ["--followup"]
    argv = argv[1:] if followup else argv
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    checks = table(gather(argv, setting="cohort_contested", default="hold", keep=shipped), followup)
    print("\n## The plan's criteria\n")
    print_checks(dict(sorted(checks.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
