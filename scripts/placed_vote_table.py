"""The placed-vote study (``docs/results/placed-vote``) as Markdown: ``FedLNS(cohort_vote="placed")`` beside
``FedLNS()`` as it ships and FedAvg in each cell, and the plan's criteria, each met or missed.

Reads the study's runs (``scripts/results_placed_vote.sh``: the candidate everywhere, FedAvg and ``FedLNS()`` in the
attacks against it) first, then the folders that hold ``FedLNS()``'s, FedAvg's and the oracle's runs of the matrix's
cells (``docs/results/adaptive/seed100`` and ``seed300``). Only ``FedLNS()`` runs with today's defaults are read.

With ``--followup``, the plan's follow-up instead (D, E and F: ``edgeless``, more seeds of ``weak_core`` and
``agree_blend``, BERT), its runs first (``PART=followup``), then ``docs/results/adaptive/bert40`` (``FedLNS()`` on BERT)
and ``docs/results/lora-matrix/frozen`` (BERT's FedAvg).

With ``--settled``, follow-up 2 (S1-S3: ``cohort_vote="settled"``), its runs first (``PART=settled``), then
``docs/results/placed-vote`` (``"placed"``, and FedLNS() and FedAvg under ``weak_core``) and
``docs/results/adaptive/seed100`` (FedLNS() and FedAvg in the matrix's cells).

With ``--settled-followup``, follow-up 3 (``"settled"`` in D, E and F), its runs first (``PART=settled_followup``),
then ``docs/results/placed-vote/followup`` (FedAvg and ``FedLNS()`` in D and E), ``docs/results/adaptive/bert40`` and
``docs/results/lora-matrix/frozen``.

With ``--settled-cpu``, follow-up 4 (``"settled"`` in the ``cpu`` preset), its runs first (``PART=settled_cpu``), then
``docs/results/adaptive`` (its candidate's runs: ``FedLNS()`` as it ships).

With ``--settled-against``, follow-up 5 (``FedLNS()``, now the settled vote, against ``weak_sleeper``, ``agree_blend``
at seeds 400 and 500, and A's other attacks), its runs first (``PART=settled_against``, the round vote's and FedAvg's
runs of W and X with them), then ``docs/results/placed-vote`` (A's round-vote and FedAvg runs).

With ``--settled-seed300``, follow-up 6 (S1 and S3's cells at seed 300, ``FedLNS()`` now the settled vote), its runs
first (``PART=settled_seed300``), then ``docs/results/placed-vote`` (the placed vote's runs of C) and
``docs/results/adaptive/seed300`` (the round vote's, FedAvg's and clean FedAvg's).

Usage: python scripts/placed_vote_table.py [--followup | --settled | --settled-followup | --settled-cpu |
       --settled-against | --settled-seed300] STUDY MORE...
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Iterator
from functools import partial

from cohort_vote_table import detects, gather, rates, text, worse  # scripts/, beside this one
from cohort_weight_table import only
from lora_matrix_table import ATTACKS as MATRIX_ATTACKS
from lora_matrix_table import checklist, print_checks

SHIPPED = {"cohort_cut": "confirmed", "cohort_weight": "agreeing", "cohort_undecided": "adaptive", "quorum": 0.0}


def today(run: dict) -> bool:
    """FedAvg, the oracle, and FedLNS() with today's defaults (whatever its vote)."""
    config = run["config"]
    return run["method"] != "fedlns_default" or all(config.get(k) == v for k, v in SHIPPED.items())


def from_scratch(run: dict) -> bool:
    """As :func:`today`, of the runs that train the whole model (the ``cpu`` preset), not LoRA adapters."""
    return today(run) and not run["config"].get("peft")


def versus(run: dict | None, than: dict | None) -> str:
    return "-" if run is None or than is None else f"{worse(run, than):+.1%}"


#: The header's line under ``rows``'s table where the candidate is FedLNS() as it ships (``names``' second).
SHIPPED_INTRO = (
    '{1}: `FedLNS()`\nas it ships (`cohort_vote="{1}"`); round: `FedLNS(cohort_vote="round")`, the default before.'
)


def rows(
    cells: dict,
    add,
    numbers: tuple[str, str],
    vote="placed",
    need_fedavg: bool = True,
    base="round",
    names: tuple[str, str] | None = None,
    intro: str | None = None,
) -> Iterator[tuple[str, tuple, dict, dict, dict | None]]:
    """Print the table, one row per cell with the candidate's run (``cells[key][vote]``, ``FedLNS(cohort_vote=vote)``
    unless said); yield each complete cell's name, key, and the candidate's, the compared run's (``base``, FedLNS()'s)
    and FedAvg's runs, after adding the two criteria every plan has (``add``, numbered as in the plan by ``numbers``:
    at most 1% worse than FedLNS(), and no round of attackers only where FedLNS() has none). Without ``need_fedavg``
    a cell needs only FedLNS()'s run. ``names`` labels the compared run and the candidate (FedLNS() and ``vote``),
    ``intro`` the line under the header that says what they are (``str.format``-ed with ``names``)."""
    than, label = names or ("FedLNS()", str(vote))
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR; the rounds that kept attackers only. ", end="")
    default_intro = 'FedLNS(): as\nit ships (`cohort_vote="round"`); {1}: `FedLNS(cohort_vote="{1}")`.'
    print((intro or default_intro).format(than, label) + "\n")
    print(
        f"| seed | family | partition | malicious | attack | FedAvg | {than} | **{label}** | {label} vs {than} "
        f"| vs FedAvg: {than} | {label} | TPR / FPR {than} | {label} | attackers only: {than} | {label} |"
    )
    print("|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for key in sorted(cells, key=lambda k: (k[4], k[0], k[1], -k[2], k[3])):
        family, partition, fraction, attack, seed = key
        cell = cells[key]
        ours, default = cell.get(vote), cell.get(base)
        if ours is None:
            continue
        fedavg = cell.get("clean" if fraction == 0 else "fedavg")
        name = f"seed {seed} {family} {partition} {fraction:.0%} {attack}"
        print(
            f"| {seed} | {family} | {partition} | {fraction:.0%} | {attack} | {text(fedavg)} | {text(default)} | "
            f"**{text(ours)}** | {versus(ours, default)} | {versus(default, fedavg)} | {versus(ours, fedavg)} | "
            f"{rates(default)} | {rates(ours)} | {only(default)} | {only(ours)} |"
        )
        if default is None or (need_fedavg and fedavg is None):
            add(f"every cell has {than}'s and FedAvg's runs", f"{name}: missing", False)
            continue
        add(
            f"{numbers[0]}. at most 1% worse than {than} (best checkpoint and last 10 rounds)",
            f"{name}: {worse(ours, default):+.1%}",
            worse(ours, default) <= 0.01,
        )
        add(
            f"{numbers[1]}. no round of attackers only where {than} has none",
            f"{name}: {label} {only(ours)}, {than} {only(default)}",
            not (ours["attackers_only_rounds"] and not default["attackers_only_rounds"]),
        )
        yield name, key, ours, default, fedavg


def rejected(tally: dict, vote: Hashable, run: dict) -> None:
    """Add ``run``'s honest updates rejected, and all its honest updates, to ``tally[vote]``."""
    tally[vote][0] += run["fp"]
    tally[vote][1] += run["fp"] + run["tn"]


def fewer_rejected(add, tally: dict, vote: str, than: str = "FedLNS()") -> None:
    """The criterion that ``vote`` rejects fewer honest updates at 20% than the round vote (``tally["round"]``,
    labelled ``than``)."""
    (fp_round, all_round), (fp, total) = tally["round"], tally[vote]
    add(
        f"1. at 20%: fewer honest updates rejected than {than}",
        f"{vote} {fp} of {total}, {than} {fp_round} of {all_round}",
        fp < fp_round,
    )


def as_many(add, test: str, counts: dict, vote: str, other: str, than: str = "FedLNS()") -> None:
    """The criterion that ``counts[vote]`` is at least ``counts[other]`` (``"round"`` labelled ``than``)."""
    label = than if other == "round" else other
    add(test, f"{vote} {counts[vote]}, {label} {counts[other]}", counts[vote] >= counts[other])


def table(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    """The first plan (A, B and C) and its five criteria."""
    checks, add = checklist()
    honest = {"round": [0, 0], "placed": [0, 0]}  # criterion 1: honest updates rejected, of all, at 20%
    within = {"round": 0, "placed": 0}  # criteria 1 and 5: cells within 1% of FedAvg
    clean_within = {"round": 0, "placed": 0}
    for name, (family, partition, fraction, attack, seed), ours, default, fedavg in rows(cells, add, ("2", "4")):
        matrix = seed in (100, 300) and (attack in MATRIX_ATTACKS or fraction == 0)
        if matrix and fraction == 0.2:
            for vote, run in (("round", default), ("placed", ours)):
                rejected(honest, vote, run)
                within[vote] += worse(run, fedavg) <= 0.01
        if matrix and fraction == 0:
            for vote, run in (("round", default), ("placed", ours)):
                clean_within[vote] += worse(run, fedavg) <= 0.01
        if fraction == 0.4 and attack == "target_corruption":
            add(
                "3. target corruption at 40%: TPR >= 0.95 and FPR <= 0.05",
                f"{name}: {rates(ours)}",
                detects(ours),
            )
    fewer_rejected(add, honest, "placed")
    as_many(add, "1. at 20%: within 1% of FedAvg in at least as many cells", within, "placed", "round")
    as_many(add, "5. without attackers: within 1% of FedAvg in at least as many cells", clean_within, "placed", "round")
    return checks


def followup(cells: dict, vote: str = "placed") -> dict[str, list[tuple[str, bool]]]:
    """The follow-up (D, E and F) and its four criteria, for ``FedLNS(cohort_vote=vote)``."""
    checks, add = checklist()
    for name, (family, _, fraction, attack, _), ours, default, fedavg in rows(cells, add, ("1", "4"), vote=vote):
        if attack == "edgeless" and worse(default, fedavg) <= 0.01:
            add(
                "2. under edgeless: within 1% of FedAvg wherever FedLNS() is",
                f"{name}: {worse(ours, fedavg):+.1%} (FedLNS() {worse(default, fedavg):+.1%})",
                worse(ours, fedavg) <= 0.01,
            )
        if family == "bert" and fraction == 0.4 and attack == "target_corruption":
            add(
                "3. BERT, target corruption at 40%: TPR >= 0.95 and FPR <= 0.05",
                f"{name}: {rates(ours)}",
                detects(ours),
            )
    return checks


def settled(cells: dict, shipped: bool = False) -> dict[str, list[tuple[str, bool]]]:
    """Follow-up 2 (S1-S3: ``cohort_vote="settled"``) and its four criteria; with ``shipped``, follow-up 6's (the
    same cells at seed 300, the settled vote now FedLNS() as it ships and the round vote the default before)."""
    checks, add = checklist()
    than = "round" if shipped else "FedLNS()"
    labels = dict(names=("round", "settled"), intro=SHIPPED_INTRO) if shipped else {}
    honest = {"round": [0, 0], "settled": [0, 0]}  # criterion 1: honest updates rejected, of all, at 20%
    within = {"placed": 0, "settled": 0}  # criterion 1: cells within 1% of FedAvg at 20%
    clean_within = {"round": 0, "settled": 0}  # criterion 4
    for name, key, ours, default, fedavg in rows(cells, add, ("2", "3"), vote="settled", **labels):
        fraction = key[2]
        if fraction == 0.2:
            for vote, run in (("round", default), ("settled", ours)):
                rejected(honest, vote, run)
            placed = cells[key].get("placed")
            if placed is None:
                add("every cell at 20% has the placed vote's run", f"{name}: missing", False)
            else:
                within["placed"] += worse(placed, fedavg) <= 0.01
            within["settled"] += worse(ours, fedavg) <= 0.01
        if fraction == 0:
            for vote, run in (("round", default), ("settled", ours)):
                clean_within[vote] += worse(run, fedavg) <= 0.01
    fewer_rejected(add, honest, "settled", than)
    as_many(add, "1. at 20%: within 1% of FedAvg in as many cells as placed", within, "settled", "placed")
    test = f"4. without attackers: within 1% of FedAvg in at least as many cells as {than}"
    as_many(add, test, clean_within, "settled", "round", than)
    return checks


def settled_cpu(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    """Follow-up 4 (``cohort_vote="settled"`` in the ``cpu`` preset) and its three criteria."""
    checks, add = checklist()
    for name, (_, _, fraction, attack, _), ours, default, _ in rows(cells, add, ("1", "2"), "settled", False):
        if fraction == 0.4 and attack == "target_corruption" and detects(default):
            add(
                "3. target corruption at 40%: TPR >= 0.95 and FPR <= 0.05 wherever FedLNS() meets it",
                f"{name}: {rates(ours)}",
                detects(ours),
            )
    return checks


def settled_against(cells: dict) -> dict[str, list[tuple[str, bool]]]:
    """Follow-up 5 (``FedLNS()`` with the settled vote against W, X and Y) and its three criteria."""
    checks, add = checklist()
    settled = rows(cells, add, ("1", "2"), vote="settled", names=("round", "settled"), intro=SHIPPED_INTRO)
    for name, _, ours, _, fedavg in settled:
        add(
            "3. within 1% of FedAvg (best checkpoint and last 10 rounds)",
            f"{name}: {worse(ours, fedavg):+.1%}",
            worse(ours, fedavg) <= 0.01,
        )
    return checks


PLANS = {
    "--followup": followup,
    "--settled": settled,
    "--settled-followup": partial(followup, vote="settled"),
    "--settled-cpu": settled_cpu,
    "--settled-against": settled_against,
    "--settled-seed300": partial(settled, shipped=True),
}


def main(argv: list[str]) -> int:
    plan = PLANS.get(argv[0], table) if argv else table
    argv = argv[1:] if plan is not table else argv
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    keep = from_scratch if plan is settled_cpu else today  # adaptive's folder holds LoRA runs of the same cells
    checks = plan(gather(argv, keep=keep))
    print("\n## The plan's criteria\n")
    print_checks(dict(sorted(checks.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
