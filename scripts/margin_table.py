"""The margin study (``docs/results/margin``) as Markdown: ``FedLNS(cohort_margin=0.5)`` beside ``FedLNS()`` as it
ships (the settled vote) and FedAvg in each cell, and the plan's criteria, each met or missed.

Reads the study's runs (``scripts/results_margin.sh``) first, then the folders that hold ``FedLNS()``'s and FedAvg's
runs of the same cells: ``docs/results/placed-vote/settled``, ``docs/results/placed-vote`` and
``docs/results/adaptive/seed100``. Of ``FedLNS()``'s runs only those with today's defaults are read.

With ``--followup``, the plan's follow-up (``margin_blend`` and seed 300 without attackers), its runs first
(``PART=followup``), then ``docs/results/adaptive/seed300`` (clean FedAvg).

Usage: python scripts/margin_table.py [--followup] STUDY MORE...
"""

from __future__ import annotations

import sys

from cohort_vote_table import detects, gather, rates, worse  # scripts/, beside this one
from lora_matrix_table import checklist, print_checks
from placed_vote_table import SHIPPED, rejected, rows

CANDIDATE = 0.5  # the plan's margin
INTRO = f"FedLNS(): as\nit ships (the settled vote, `cohort_margin=0`); {{1}}: `FedLNS(cohort_margin={CANDIDATE})`."


def shipped(run: dict) -> bool:
    """FedAvg, clean FedAvg, the oracle, and FedLNS() with today's defaults (the settled vote; any margin)."""
    config = run["config"]
    settled = config.get("cohort_vote") == "settled" and all(config.get(k) == v for k, v in SHIPPED.items())
    return run["method"] != "fedlns_default" or settled


def table(cells: dict, followup: bool = False) -> dict[str, list[tuple[str, bool]]]:
    """The plan's four criteria (with ``followup``, its follow-up's three: the every-plan two, and the cells without
    attackers as the first plan's criterion 1)."""
    checks, add = checklist()
    honest = {0.0: [0, 0], CANDIDATE: [0, 0]}  # honest updates rejected, of all, without attackers
    within = {0.0: 0, CANDIDATE: 0}  # cells within 1% of FedAvg without attackers
    names = ("FedLNS()", f"margin {CANDIDATE}")
    numbers = ("1", "2") if followup else ("2", "3")
    for name, key, ours, default, fedavg in rows(cells, add, numbers, CANDIDATE, base=0.0, names=names, intro=INTRO):
        fraction, attack = key[2], key[3]
        if fraction == 0:
            for margin, run in ((0.0, default), (CANDIDATE, ours)):
                rejected(honest, margin, run)
                within[margin] += worse(run, fedavg) <= 0.01
        if fraction == 0.4 and attack == "target_corruption" and not followup:
            add("4. target corruption at 40%: TPR >= 0.95 and FPR <= 0.05", f"{name}: {rates(ours)}", detects(ours))
    (fp_shipped, all_shipped), (fp, total) = honest[0.0], honest[CANDIDATE]
    number = "3" if followup else "1"
    add(
        f"{number}. without attackers: fewer honest updates rejected than FedLNS()",
        f"margin {fp} of {total}, FedLNS() {fp_shipped} of {all_shipped}",
        fp < fp_shipped,
    )
    add(
        f"{number}. without attackers: within 1% of FedAvg in at least as many cells",
        f"margin {within[CANDIDATE]}, FedLNS() {within[0.0]}",
        within[CANDIDATE] >= within[0.0],
    )
    return checks


def main(argv: list[str]) -> int:
    followup = argv[:1] == ["--followup"]
    argv = argv[1:] if followup else argv
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    checks = table(gather(argv, setting="cohort_margin", default=0.0, keep=shipped), followup)
    print("\n## The plan's criteria\n")
    print_checks(dict(sorted(checks.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
