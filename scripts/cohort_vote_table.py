"""The cohort-vote study (``docs/results/cohort-vote``) as Markdown: ``FedLNS(cohort_vote="history")`` beside the
default vote and FedAvg in each cell, and the plan's tests for making it the default, each met or missed.

Reads the study's runs (``scripts/results_cohort_vote.sh``) and the folders holding the default's and the
references' runs of the same cells (``docs/results/lora-matrix/frozen``, ``docs/results/cut-test/tree``): runs
folders or results folders holding their archive. Clean FedAvg and the oracle come from those folders; a run in
more than one folder is read from the first.

Usage: python scripts/cohort_vote_table.py STUDY REFERENCE [REFERENCE ...]
"""

from __future__ import annotations

import json
import math
import sys

from fedlns_sim.report.load import load_runs
from fedlns_sim.report.stats import detection_rates
from fedlns_sim.runstore import stored_runs

OURS = "fedlns_default"


def votes(source: str) -> dict[str, str]:
    """Run name -> the cohort vote its ``FedLNS()`` ran with (runs made before the setting: "round")."""
    return {
        name: json.loads(files["config.json"])["config"].get("cohort_vote", "round")
        for name, files in stored_runs(source)
    }


def gather(sources: list[str]) -> dict:
    """(family, partition, fraction, attack, seed) -> {"fedavg" | "round" | "history" | "clean" | "oracle": run}."""
    cells: dict = {}
    for source in sources:
        vote = votes(source)
        for run in load_runs(source):
            method = run["method"]
            if method == OURS:
                method = vote[run["run"]]
            elif method == "fedavg" and run["fraction"] == 0:
                method = "clean"
            elif method not in ("fedavg", "oracle"):
                continue
            attack = "-" if run["fraction"] == 0 or method == "oracle" else run["attack"]
            cell = cells.setdefault((run["family"], run["partition"], run["fraction"], attack, run["seed"]), {})
            cell.setdefault(method, run)
    return cells


def text(run: dict | None) -> str:
    return "-" if run is None else f"{run['perplexity']:.1f} / {run['last10_perplexity']:.1f}"


def rates(run: dict | None) -> str:
    if run is None:
        return "-"
    r = detection_rates(run["tp"], run["fp"], run["fn"], run["tn"])
    return ("-" if math.isnan(r["tpr"]) else f"{r['tpr']:.2f}") + f" / {r['fpr']:.2f}"


def worse(run: dict, than: dict) -> float:
    """How much worse ``run`` is than ``than`` at the worse of the best checkpoint and the last 10 rounds."""
    return max(run[k] / than[k] - 1 for k in ("perplexity", "last10_perplexity"))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv)
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR of the two votes.\n")
    print(
        "| family | partition | malicious | attack | seed | clean | oracle | FedAvg | round (default) | history "
        "| TPR / FPR round | TPR / FPR history |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    checks: dict[str, list[tuple[str, bool]]] = {}
    for key in sorted(cells, key=lambda k: (k[2], k[0], k[1], k[3], k[4])):
        family, partition, fraction, attack, seed = key
        cell = cells[key]
        ours = cell.get("history")
        if ours is None:
            continue
        clean = cells.get((family, partition, 0.0, "-", seed), {}).get("clean")
        oracle = cells.get((family, partition, fraction, "-", seed), {}).get("oracle")
        default, fedavg = cell.get("round"), cell.get("fedavg")
        print(
            f"| {family} | {partition} | {fraction:.0%} | {attack} | {seed} | {text(clean)} | {text(oracle)} | "
            f"{text(fedavg)} | {text(default)} | **{text(ours)}** | {rates(default)} | {rates(ours)} |"
        )
        name = f"{family} {partition} {fraction:.0%} {attack} seed {seed}"
        if fraction == 0 and clean is not None:
            checks.setdefault("without attackers, at most +1% against clean FedAvg", []).append(
                (f"{name}: {worse(ours, clean):+.1%}", worse(ours, clean) <= 0.01)
            )
        if fraction == 0.2 and fedavg is not None:
            checks.setdefault("at 20%, at most 1% worse than FedAvg", []).append(
                (f"{name}: {worse(ours, fedavg):+.1%}", worse(ours, fedavg) <= 0.01)
            )
        if fraction > 0 and default is not None:
            fewer = ours["fp"] < default["fp"]
            if fraction == 0.2:
                checks.setdefault("at 20%, fewer honest rejections than the default", []).append(
                    (f"{name}: {ours['fp']} against {default['fp']}", fewer)
                )
            if fraction == 0.4 or attack in ("sleeper", "majority_only", "cut_blend", "half_blend"):
                target = "at 40% and under the attacks against it, at most 1% worse than the default"
                checks.setdefault(target, []).append(
                    (f"{name}: {worse(ours, default):+.1%}", worse(ours, default) <= 0.01)
                )
        if fraction == 0.4 and attack == "target_corruption":
            tpr = detection_rates(ours["tp"], ours["fp"], ours["fn"], ours["tn"])["tpr"]
            checks.setdefault("at 40%, TPR >= 0.95 under target corruption", []).append(
                (f"{name}: {tpr:.2f}", tpr >= 0.95)
            )
    print("\n## The plan's tests\n")
    for target, results in checks.items():
        missed = [text for text, met in results if not met]
        verdict = "met" if not missed else "missed"
        if target.endswith("than the default") and target.startswith("at 20%"):  # "in most cells"
            verdict = "met" if 2 * (len(results) - len(missed)) > len(results) else "missed"
        print(
            f"- **{target}**: {verdict}, {len(results) - len(missed)} of {len(results)} hold it"
            + (f"; not: {'; '.join(missed)}" if missed else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
