"""The LoRA scenario's matrix (``docs/results/lora-matrix``) and the targets of its plan, as Markdown.

Reads the runs of ``scripts/results_lora_matrix.sh`` (runs folders, or results folders holding their archive) and
prints, per family, partition, fraction and attack, the mean over the seeds given of every method's best-checkpoint
and last-10 perplexity (with the seeds' standard deviation), ``FedLNS()``'s TPR / FPR (summed over the seeds'
decided rounds) and recovery ``(FedAvg - FedLNS) / (FedAvg - oracle)`` (of the seed means), with clean FedAvg and
the oracle beside them; a cell is shown when FedAvg and ``FedLNS()`` have every seed in it, marked † where the runs of
one seed come from more than one machine (a footnote says which method's runs came from which). Then the plan's targets,
each met or missed with its numbers, over the cells present:

* at 40%, under the scenario's attack (``target_corruption``), on each family and partition: recovery >= 0.9 at the
  best checkpoint and over the last 10 rounds, TPR >= 0.95, FPR <= 0.05;
* no attack more than 1% worse than FedAvg at any seed (best and last 10);
* clean cost (``FedLNS()`` without attackers against clean FedAvg, per seed) at most +1%;
* no round after activation that kept attackers only, in any ``FedLNS()`` run.

Last, against the other defences (not a target of the plan): in every cell where all of them have every seed, whether
``FedLNS()`` has the lowest seed-mean perplexity at the best checkpoint and over the last 10 rounds, and which defence
is lower where it does not.

Usage: python scripts/lora_matrix_table.py RUNS [RUNS ...] [--seeds S] [--payload NAME]
  (S: comma-separated, default 100,200,300; NAME: a label for the heading, e.g. "adapters only")
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from fedlns_sim.report.load import load_runs
from fedlns_sim.report.stats import detection_rates

OURS = "fedlns_default"
BASELINES = ("fedavg", "flame", "multi_krum", "coordinate_median", "norm_bounded_fedavg")
NAMES = {
    "fedavg": "FedAvg",
    "flame": "FLAME",
    "multi_krum": "Multi-Krum",
    "coordinate_median": "Median",
    "norm_bounded_fedavg": "Norm-Bound",
    OURS: "FedLNS()",
    "oracle": "oracle",
    "clean": "clean",
}
ATTACKS = ("target_corruption", "backdoor", "ipm", "alie", "lora_quiet", "lora_band")
SCENARIO = "target_corruption"
MIXED = "†"  # marks a row whose runs come from more than one machine


def gather(sources: list[str], seeds: tuple[int, ...]) -> dict:
    """(family, partition, fraction, attack, method) -> {seed: summary}; clean FedAvg as method "clean" under every
    (family, partition) with fraction 0, the oracle under its fraction and every attack."""
    cells: dict = defaultdict(dict)
    for source in sources:
        for run in load_runs(source):
            if run["seed"] not in seeds:
                continue
            key = (run["family"], run["partition"], run["fraction"])
            method = "clean" if run["method"] == "fedavg" and run["fraction"] == 0 else run["method"]
            attacks = ATTACKS if method == "oracle" else ("-",) if run["fraction"] == 0 else (run["attack"],)
            for attack in attacks:
                cells[(*key, attack, method)][run["seed"]] = run
    return cells


def mean(runs: dict, key: str) -> float:
    return float(np.mean([run[key] for run in runs.values()]))


def summary(runs: dict) -> str:
    """"best / last 10" of the seeds' means, each with the seeds' standard deviation when there are several."""
    parts = []
    for key in ("perplexity", "last10_perplexity"):
        values = [run[key] for run in runs.values()]
        parts.append(f"{np.mean(values):.1f}" + (f" ±{np.std(values, ddof=1):.1f}" if len(values) > 1 else ""))
    return " / ".join(parts)


def rates(runs: dict) -> tuple[float, float]:
    """TPR and FPR of the seeds' decided rounds together."""
    totals = detection_rates(**{k: sum(run[k] for run in runs.values()) for k in ("tp", "fp", "fn", "tn")})
    return totals["tpr"], totals["fpr"]


def lower(defences: dict, ours: dict, key: str) -> list[str]:
    """The defences whose seed mean of ``key`` is below FedLNS()'s, as "name value against FedLNS()'s"."""
    return [
        f"{NAMES[m]} {mean(runs, key):.1f} against {mean(ours, key):.1f}"
        for m, runs in defences.items()
        if mean(runs, key) < mean(ours, key)
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--seeds", default="100,200,300")
    parser.add_argument("--payload", default="")
    args = parser.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    cells = gather(args.runs, seeds)
    locked = {  # run name -> the rounds after activation that kept attackers only, for every FedLNS() run shown
        run["run"]: run["attackers_only_rounds"] for key, cell in cells.items() if key[4] == OURS for run in cell.values()
    }
    complete = lambda cell: cell is not None and set(cell) == set(seeds)  # noqa: E731

    settings = sorted({key[:3] for key in cells if key[2] > 0})
    print(f"# The LoRA matrix{': ' + args.payload if args.payload else ''} (seeds {args.seeds})\n")
    print(
        "Best checkpoint / last 10 rounds' perplexity, mean over the seeds (± their standard deviation where there "
        "are several); FedLNS() with TPR / FPR and recovery (best / last 10).\n"
    )
    methods = [m for m in BASELINES[1:] if any(key[4] == m for key in cells)]
    print(
        "| family | partition | malicious | attack | clean | oracle | FedAvg | FedLNS() | TPR / FPR | recovery |"
        + "".join(f" {NAMES[m]} |" for m in methods)
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(methods))
    checks = defaultdict(list)  # target -> [(cell text, met)]
    mixed = []  # rows whose runs come from more than one machine: (cell text, {method: its runs' machines})
    ranks = []  # per cell with every defence: (cell text, [the defences lower than FedLNS() at best, at last 10])
    for family, partition, fraction in settings:
        clean = cells.get((family, partition, 0.0, "-", "clean"))
        for attack in ATTACKS:
            ours, fedavg = (
                cells.get((family, partition, fraction, attack, OURS)),
                cells.get((family, partition, fraction, attack, "fedavg")),
            )
            if not (complete(ours) and complete(fedavg)):
                continue
            oracle = cells.get((family, partition, fraction, attack, "oracle"))
            defences = {m: cells.get((family, partition, fraction, attack, m)) for m in methods}
            row = {"clean": clean, "oracle": oracle, "fedavg": fedavg, OURS: ours, **defences}
            cell = f"{family} {partition} {fraction:.0%} {attack}"
            per_seed = [{runs[s]["machine"] for runs in row.values() if runs and s in runs} for s in seeds]
            is_mixed = any(len(machines) > 1 for machines in per_seed)  # one seed's runs compared across machines
            if is_mixed:
                made_on = {m: sorted({r["machine"] for r in runs.values()}) for m, runs in row.items() if runs}
                mixed.append((cell, made_on))
            text = lambda runs: summary(runs) if complete(runs) else "-"  # noqa: E731
            tpr, fpr = rates(ours)
            recovery = []
            for key in ("perplexity", "last10_perplexity"):
                gap = mean(fedavg, key) - mean(oracle, key) if complete(oracle) else math.nan
                recovery.append((mean(fedavg, key) - mean(ours, key)) / gap if gap else math.nan)
            others = [text(defences[m]) for m in methods]
            print(
                f"| {family} | {partition} | {fraction:.0%} | {attack}{MIXED if is_mixed else ''} "
                f"| {text(clean)} | {text(oracle)} | "
                f"{text(fedavg)} | **{text(ours)}** | {tpr:.2f} / {fpr:.2f} | {recovery[0]:.2f} / "
                f"{recovery[1]:.2f} |" + "".join(f" {other} |" for other in others)
            )
            if len(methods) == len(BASELINES) - 1 and all(complete(runs) for runs in defences.values()):
                ranks.append((cell, [lower(defences, ours, key) for key in ("perplexity", "last10_perplexity")]))
            if fraction == 0.4 and attack == SCENARIO:
                met = min(recovery) >= 0.9 and tpr >= 0.95 and fpr <= 0.05
                checks["recovery >= 0.9 (best, last 10), TPR >= 0.95, FPR <= 0.05 at 40%"].append(
                    (f"{cell}: recovery {recovery[0]:.3f} / {recovery[1]:.3f}, TPR / FPR {tpr:.3f} / {fpr:.3f}", met)
                )
            worst = max(ours[s][k] / fedavg[s][k] - 1 for s in seeds for k in ("perplexity", "last10_perplexity"))
            checks["at most 1% worse than FedAvg at any seed"].append((f"{cell}: {worst:+.1%}", worst <= 0.01))
    for family, partition in sorted({key[:2] for key in settings}):
        ours, clean = cells.get((family, partition, 0.0, "-", OURS)), cells.get((family, partition, 0.0, "-", "clean"))
        if complete(ours) and complete(clean):
            cost = max(ours[s][k] / clean[s][k] - 1 for s in seeds for k in ("perplexity", "last10_perplexity"))
            checks["clean cost at most +1% (worst seed)"].append((f"{family} {partition}: {cost:+.1%}", cost <= 0.01))
    for name, rounds in sorted(locked.items()):
        checks["no attackers-only round after activation"].append((f"{name}: {rounds or 'none'}", not rounds))

    if mixed:
        print_mixed(mixed)
    print("\n## Targets\n")
    print_checks(checks)
    if ranks:
        print("\n## Against the other defences\n")
        both = sum(1 for _, (best, last) in ranks if not best and not last)
        print(f"FedLNS() lowest at both measures in {both} of {len(ranks)} cells with every defence.")
        for label, index in (("best checkpoint", 0), ("last 10 rounds", 1)):
            beaten = [f"{cell} ({', '.join(lowers[index])})" for cell, lowers in ranks if lowers[index]]
            print(
                f"- {label}: lowest in {len(ranks) - len(beaten)} of {len(ranks)}"
                + (f"; another defence lower in {'; '.join(beaten)}" if beaten else "")
            )
    return 0


def print_mixed(mixed: list[tuple[str, dict[str, list[str]]]]) -> None:
    """The footnote of the rows marked ``MIXED``: which machine made which method's runs. Processors round
    differently (their kernels), so a row made on two compares machines as well as methods."""
    letters: dict[str, str] = {}
    for _, made_on in mixed:
        for machines in made_on.values():
            for machine in machines:
                letters.setdefault(machine, chr(ord("A") + len(letters)))
    print(
        f"\n{MIXED} At one seed or more the row's runs come from more than one machine (runs made before the "
        "processor's extensions were recorded count as another), so its comparisons may differ by machine as well as "
        "by method; per method, the machines of its runs:"
    )
    for cell, made_on in mixed:
        print(f"- {cell}: " + ", ".join(f"{NAMES[m]} {'+'.join(letters[x] for x in xs)}" for m, xs in made_on.items()))
    print("\n" + "; ".join(f"{letter}: {machine}" for machine, letter in letters.items()) + ".")


def checklist() -> tuple[dict[str, list[tuple[str, bool]]], Callable[[str, str, bool], None]]:
    """An empty set of checks (target -> [(text, met)]) and the function that adds one, for :func:`print_checks`."""
    checks: dict[str, list[tuple[str, bool]]] = {}

    def add(test: str, text: str, met: bool) -> None:
        checks.setdefault(test, []).append((text, met))

    return checks, add


def print_checks(checks: dict[str, list[tuple[str, bool]]], majority: tuple[str, ...] = ()) -> None:
    """One line per target: met or missed, how many cells hold it, the cells that do not. A target named in
    ``majority`` is met when most of its cells hold it, any other only when all do."""
    for target, results in checks.items():
        missed = [text for text, met in results if not met]
        held = len(results) - len(missed)
        met = 2 * held > len(results) if target in majority else not missed
        print(
            f"- **{target}**: {'met' if met else 'missed'}, {held} of {len(results)} hold it"
            + (f"; missed: {'; '.join(missed)}" if missed else "")
        )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
