"""The adaptive study (``docs/results/adaptive``) as Markdown: ``FedLNS(cohort_weight="agreeing",
cohort_undecided="adaptive")`` beside ``FedLNS()`` and FedAvg in each cell, and the plan's criteria, each met or
missed.

Reads the study's runs (``scripts/results_adaptive.sh``) and the contested study's sources (``docs/results/contested``
first, then the folders its table reads): its ``hold_contested`` runs are what G compares with and, with its default's
and FedAvg's runs of A-C, what criterion 5 reads beside this study's.

With ``--matrix`` the follow-up instead: ``FedLNS()`` as it ships now on the LoRA matrix's cells at seed 200 (NEW,
the runs of ``PART=matrix``) against the previous settings' runs of the same cells (OLD:
``docs/results/confirmed-cut/lora-matrix``, its ``cohort_cut="confirmed"`` runs).

With ``--seed100`` follow-up 2: ``FedLNS()`` as it ships now at seed 100 against FedAvg of the same machine (NEW,
the runs of ``PART=seed100`` and ``PART=bert20``), the issue's targets per cell, beside the previous settings' runs of
the LoRA matrix (MATRIX: ``docs/results/lora-matrix/frozen``, which also gives BERT's FedAvg). ``--seed 300``: the
same for follow-up 3 (``PART=seed300``).

Usage: python scripts/adaptive_table.py STUDY CONTESTED [MORE ...]
       python scripts/adaptive_table.py --matrix NEW OLD
       python scripts/adaptive_table.py --seed100 NEW MATRIX
       python scripts/adaptive_table.py --seed SEED NEW MATRIX
"""

from __future__ import annotations

import sys

from cohort_vote_table import gather as gather_runs  # scripts/, beside this one
from cohort_vote_table import detects, rates, text, worse
from cohort_weight_table import only
from contested_table import KNOWN, attack_checks, default_checks
from contested_table import gather as gather_cells
from lora_matrix_table import checklist, print_checks

from fedlns_sim.report.stats import detection_rates, recovery

AGAINST = ("weak_core", "majority_only", "majority_weak", "majority_drift")  # the plan's A-D
IDENTITY = {("lora", "gpt", "iid", 0.4, "weak_core", 800), ("lora", "llama", "iid", 0.4, "majority_weak", 800)}  # G


def excess(cells: dict, who: str) -> tuple[float, int, str]:
    """Over the cells' runs of ``who``: the largest excess over FedAvg, the rounds of attackers only in all, and
    the cell with that excess."""
    largest, rounds, where = float("-inf"), 0, "-"
    for key, cell in sorted(cells.items()):
        run, fedavg = cell.get(who), cell.get("fedavg")
        if run is None or fedavg is None:
            continue
        rounds += len(run["attackers_only_rounds"])
        if worse(run, fedavg) > largest:
            largest, where = worse(run, fedavg), " ".join(str(k) for k in key)
    return largest, rounds, where


def checks_of(cells: dict, contested: dict) -> dict[str, list[tuple[str, bool]]]:
    checks, add = checklist()
    attacked = {}  # A-D here and the contested plan's A-C: criterion 5
    for key in sorted(cells):
        preset, family, partition, fraction, attack, seed = key
        cell = cells[key]
        ours, fedavg = cell.get("candidate"), cell.get("fedavg")
        name = f"{preset} {family} {partition} {fraction:.0%} {attack} seed {seed}"
        if ours is None:
            continue
        if key in IDENTITY:
            before = contested.get(key, {}).get("candidate")
            same = before is not None and ours["curve"] == before["curve"]
            add("4. G: the same perplexity in every round as hold_contested", name, same)
            continue
        if attack in AGAINST and (preset == "lora" or attack == "majority_drift"):  # A-D; F's cpu majority_only: 3
            attacked[key] = cell
            test = "1. under weak_core, majority_only, majority_weak and majority_drift"
            attack_checks(add, test, name, ours, fedavg)
        else:
            default_checks(add, name, cell, preset == "lora" and attack == "target_corruption", fraction)
    for key, cell in contested.items():
        if key[0] == "lora" and key[4] in AGAINST[:3] and key[1:] not in KNOWN and "candidate" in cell:
            attacked.setdefault(key, cell)
    (ours, ours_rounds, ours_at), (default, default_rounds, default_at) = (
        excess(attacked, w) for w in ("candidate", "default")
    )
    add(
        "5. against the default: a smaller largest excess over FedAvg under A-D (and contested's A-C)",
        f"{len(attacked)} cells: candidate {ours:+.1%} ({ours_at}), default {default:+.1%} ({default_at})",
        ours < default,
    )
    add(
        "5. against the default: fewer rounds of attackers only in all",
        f"candidate {ours_rounds}, default {default_rounds}",
        ours_rounds < default_rounds,
    )
    return checks


def matrix(new: str, old: str) -> int:
    """The follow-up's table and criteria: each LoRA cell's run of the new settings beside the previous settings'."""

    def keep(run: dict) -> bool:
        config = run["config"]
        return (
            run["method"] == "fedlns_default"
            and config.get("peft") == "lora"
            and config.get("cohort_cut") == "confirmed"
            and (config.get("cohort_weight", "unit"), config.get("cohort_undecided"))
            in (("unit", "support"), ("agreeing", "adaptive"))
        )

    cells = gather_runs([new, old], setting="cohort_undecided", default="support", keep=keep)
    checks, add = checklist()
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR; the rounds that kept attackers only.\n")
    print(
        "| family | partition | malicious | attack | previous | now | TPR / FPR previous | now | attackers only: previous | now |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---|---|")
    for key in sorted(cells):
        family, partition, fraction, attack, _ = key
        now, before = cells[key].get("adaptive"), cells[key].get("support")
        if now is None:
            continue
        name = f"{family} {partition} {fraction:.0%} {attack}"
        print(
            f"| {family} | {partition} | {fraction:.0%} | {attack} | {text(before)} | {text(now)} | {rates(before)} | "
            f"{rates(now)} | {only(before)} | {only(now)} |"
        )
        if before is None:
            add("every cell has the previous settings' run", f"{name}: missing", False)
            continue
        add("within 1% of the previous settings", f"{name}: {worse(now, before):+.1%}", worse(now, before) <= 0.01)
        add(
            "no round of attackers only where the previous settings have none",
            f"{name}: now {only(now)}, previous {only(before)}",
            not (now["attackers_only_rounds"] and not before["attackers_only_rounds"]),
        )
        if fraction == 0.4 and attack == "target_corruption":
            add(
                "target corruption at 40%: TPR >= 0.95 and FPR <= 0.05",
                f"{name}: {rates(now)}",
                detects(now),
            )
    print("\n## The follow-up's criteria\n")
    print_checks(checks)
    return 0


def seeded(new: str, frozen: str, seed: int = 100) -> int:
    """Follow-up 2's (seed 100) or 3's (seed 300) table and the issue's targets: each cell's run of FedLNS() as it
    ships, against FedAvg."""

    def now(run: dict) -> bool:
        config = run["config"]
        return run["seed"] == seed and (
            run["method"] != "fedlns_default"
            or (config.get("cohort_weight"), config.get("cohort_undecided")) == ("agreeing", "adaptive")
        )

    def before(run: dict) -> bool:  # the matrix's FedLNS() (the previous settings), FedAvg and the references
        config = run["config"]
        return run["seed"] == seed and (
            run["method"] != "fedlns_default"
            or (
                config.get("cohort_undecided", "support") == "support" and config.get("cohort_weight", "unit") == "unit"
            )
        )

    cells = gather_runs([new], setting="cohort_undecided", default="support", keep=now)
    matrix = gather_runs([frozen], setting="cohort_undecided", default="support", keep=before)
    checks, add = checklist()
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR; the rounds that kept attackers only. FedAvg and")
    print(
        "FedLNS() now: this machine's runs (BERT's FedAvg and oracle: the matrix's, made here too); previous: the "
        "matrix's.\n"
    )
    print(
        "| family | partition | malicious | attack | FedAvg | **now** | vs FedAvg | previous | TPR / FPR now "
        "| previous | attackers only: now | previous |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|")
    for key in sorted(cells):
        family, partition, fraction, attack, _ = key
        ours = cells[key].get("adaptive")
        if ours is None:
            continue
        reference = "clean" if fraction == 0 else "fedavg"  # FedAvg of the cell: this machine's, else the matrix's
        fedavg = cells[key].get(reference) or matrix.get(key, {}).get(reference)
        previous = matrix.get(key, {}).get("support")
        name = f"{family} {partition} {fraction:.0%} {attack}"
        excess = "-" if fedavg is None else f"{worse(ours, fedavg):+.1%}"
        print(
            f"| {family} | {partition} | {fraction:.0%} | {attack} | {text(fedavg)} | **{text(ours)}** | {excess} | "
            f"{text(previous)} | {rates(ours)} | {rates(previous)} | {only(ours)} | {only(previous)} |"
        )
        if fedavg is None:
            add("every cell has FedAvg's run", f"{name}: missing", False)
            continue
        test = "3. without attackers, at most 1% above FedAvg" if fraction == 0 else "1. at most 1% above FedAvg"
        add(test, f"{name}: {worse(ours, fedavg):+.1%}", worse(ours, fedavg) <= 0.01)
        add("2. no round of attackers only", f"{name}: {only(ours)}", not ours["attackers_only_rounds"])
        if fraction == 0.4 and attack == "target_corruption":
            found = detection_rates(ours["tp"], ours["fp"], ours["fn"], ours["tn"])
            add("4. target corruption at 40%: TPR >= 0.95", f"{name}: {found['tpr']:.2f}", found["tpr"] >= 0.95)
            add("4. target corruption at 40%: FPR <= 0.05", f"{name}: {found['fpr']:.3f}", found["fpr"] <= 0.05)
            oracle_key = (family, partition, fraction, "-", seed)  # this machine's oracle, else the matrix's (BERT)
            oracle = cells.get(oracle_key, {}).get("oracle") or matrix.get(oracle_key, {}).get("oracle")
            if oracle is None:
                add("4. target corruption at 40%: recovery >= 0.9", f"{name}: no oracle run", False)
            else:
                best, last = (recovery(fedavg[k], ours[k], oracle[k]) for k in ("perplexity", "last10_perplexity"))
                add(
                    "4. target corruption at 40%: recovery >= 0.9 (best / last 10)",
                    f"{name}: {best:.2f} / {last:.2f} (oracle {text(oracle)})",
                    min(best, last) >= 0.9,
                )
    print("\n## The follow-up's criteria\n")
    print_checks(dict(sorted(checks.items())))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--matrix"] and len(argv) == 3:
        return matrix(argv[1], argv[2])
    if argv[:1] == ["--seed100"] and len(argv) == 3:
        return seeded(argv[1], argv[2])
    if argv[:1] == ["--seed"] and len(argv) == 4:
        return seeded(argv[2], argv[3], int(argv[1]))
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cells, contested = gather_cells(argv[:1], "adaptive"), gather_cells(argv[1:], "hold_contested")
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR; the rounds that kept attackers only. G: the runs")
    print("compared with the contested study's hold_contested runs.\n")
    print(
        "| preset | family | partition | malicious | attack | seed | FedAvg | default | candidate | TPR / FPR default "
        "| candidate | attackers only: default | candidate |"
    )
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|")
    for key in sorted(cells, key=lambda k: (k[0] != "lora", k[4] not in AGAINST, k in IDENTITY, k[4], k[1], k[5])):
        cell = cells[key]
        if "candidate" not in cell:
            continue
        preset, family, partition, fraction, attack, seed = key
        columns = [text(cell.get("fedavg")), text(cell.get("default")), text(cell["candidate"])]
        columns += [
            rates(cell.get("default")),
            rates(cell["candidate"]),
            only(cell.get("default")),
            only(cell["candidate"]),
        ]
        mark = " (G)" if key in IDENTITY else ""
        print(
            f"| {preset} | {family} | {partition} | {fraction:.0%} | {attack}{mark} | {seed} | "
            + " | ".join(columns)
            + " |"
        )
    print("\n## The plan's criteria\n")
    checks = dict(sorted(checks_of(cells, contested).items()))  # by criterion
    print_checks(checks)
    print(
        "\nCriterion 5's figures: "
        + "; ".join(text for target in checks if target[0] == "5" for text, _ in checks[target])
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
