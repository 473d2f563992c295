"""The quorum study (``docs/results/quorum``) as Markdown: ``FedLNS(quorum=0.5)`` beside ``FedLNS()`` and FedAvg in
each cell, the rounds it held, and the plan's criteria, each met or missed.

Reads the study's runs (``scripts/results_quorum.sh``) and cohort-weight/seeds' (the default's and FedAvg's at seeds
400 and 500): runs folders or results folders holding their archive; a run in more than one folder is read from the
first. Runs of ``cohort_weight="coherence"`` are left out.

Usage: python scripts/quorum_table.py STUDY [MORE ...]
"""

from __future__ import annotations

import sys

from cohort_vote_table import gather as gather_runs  # scripts/, beside this one
from cohort_vote_table import worse
from cohort_weight_table import add_gap_checks, cell_groups, only, print_study
from lora_matrix_table import checklist

OURS = "fedlns_default"
AGAINST = ("weak_core",)


def gather(sources: list[str]) -> dict:
    """(family, partition, fraction, attack, seed) -> {"fedavg" | "clean" | "default" | "quorum": run}."""
    unit_weight = lambda run: run["method"] != OURS or run["config"].get("cohort_weight", "unit") == "unit"  # noqa: E731
    cells = gather_runs(sources, setting="quorum", default=0.0, keep=unit_weight)
    named = {0.0: "default", 0.5: "quorum"}  # the settings studied
    return {key: {named.get(method, method): run for method, run in cell.items()} for key, cell in cells.items()}


def held(run: dict | None) -> str:
    return "-" if run is None else str(len(run["held_rounds"]))


def checks_of(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    checks, add = checklist()
    for group, all_keys in cell_groups(cells).items():
        keys = [key for key in all_keys if "quorum" in cells[key]]
        if not keys:
            continue
        family, partition, fraction, attack = group
        name = f"{family} {partition} {fraction:.0%} {attack}"
        for key in keys:
            ours = cells[key]["quorum"]
            if fraction > 0:
                add(
                    "1. no round of attackers only after activation",
                    f"{name} seed {key[4]}: rounds {only(ours)}",
                    not ours["attackers_only_rounds"],
                )
        if attack in AGAINST:
            for key in keys:
                fedavg = cells[key].get("fedavg")
                ours = cells[key]["quorum"]
                add(
                    "2. under weak_core, at most 1% above FedAvg (best and last 10)",
                    f"{name} seed {key[4]}: " + ("no FedAvg run" if fedavg is None else f"{worse(ours, fedavg):+.1%}"),
                    fedavg is not None and worse(ours, fedavg) <= 0.01,
                )
            continue
        test = "3. without attackers" if fraction == 0 else "4. under attack"
        missing = [f"seed {k[4]}" for k in keys if "default" not in cells[k]]
        if missing:
            add(f"{test}: the default's run beside each", f"{name}: missing {', '.join(missing)}", False)
            continue
        add_gap_checks(
            add,
            name,
            [k[4] for k in keys],
            [(cells[k]["quorum"], cells[k]["default"]) for k in keys],
            averaged=f"{test}, at most 1% above the default (seeds averaged)",
            each=f"{test}, every run at most 2% above the default's",
        )
    return checks


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv)
    print_study(
        "Best checkpoint / last 10 rounds' perplexity (FedAvg: clean FedAvg in the rows without attackers); TPR /\n"
        "FPR (held clients count as rejected); the rounds that kept attackers only; the rounds the quorum held.",
        "| family | partition | malicious | attack | seed | FedAvg | default | quorum | TPR / FPR default | quorum "
        "| attackers only: default | quorum | held |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
        cells,
        "quorum",
        AGAINST,
        checks_of(cells),
        lambda cell: [held(cell["quorum"])],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
