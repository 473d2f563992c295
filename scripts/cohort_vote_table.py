"""The cohort-vote study (``docs/results/cohort-vote``) as Markdown: ``FedLNS(cohort_vote="history")`` and
``"strong"`` beside the default vote and FedAvg in each cell, and the plan's tests for making one of them the
default, each met or missed.

Reads the study's runs (``scripts/results_cohort_vote.sh``) and the folders holding the default's and the
references' runs of the same cells (``docs/results/lora-matrix/frozen``, ``docs/results/cut-test/tree``): runs
folders or results folders holding their archive. Clean FedAvg and the oracle come from those folders; a run in
more than one folder is read from the first.

Usage: python scripts/cohort_vote_table.py STUDY REFERENCE [REFERENCE ...]
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedlns_sim.report.load import load_runs
from fedlns_sim.report.stats import detection_rates
from lora_matrix_table import print_checks  # scripts/, beside this one

OURS = "fedlns_default"
VOTES = ("history", "strong")  # the votes studied; "round" is the default
AGAINST = ("sleeper", "majority_only", "cut_blend", "half_blend")  # the attacks written against the votes


def gather(
    sources: list[str],
    setting: str = "cohort_vote",
    default: Any = "round",
    group: Callable[[str, dict], str] | None = None,
    keep: Callable[[dict], bool] | None = None,
) -> dict:
    """(family, partition, fraction, attack, seed) -> {"fedavg" | "clean" | "oracle" | a value of ``setting``: run}:
    ``FedLNS()``'s runs are told apart by their ``setting`` (``default`` for runs made before it existed). With
    ``group`` the key starts with ``group(source, run)`` (:func:`by_folder`: the name of the folder the run came
    from); with ``keep``, only the runs it accepts are read."""
    cells: dict = {}
    for source in sources:
        for run in load_runs(source):
            if keep is not None and not keep(run):
                continue
            method = run["method"]
            if method == OURS:
                method = run["config"].get(setting, default)
            elif method == "fedavg" and run["fraction"] == 0:
                method = "clean"
            elif method not in ("fedavg", "oracle"):
                continue
            attack = "-" if run["fraction"] == 0 or method == "oracle" else run["attack"]
            key = (run["family"], run["partition"], run["fraction"], attack, run["seed"])
            cells.setdefault(key if group is None else (group(source, run), *key), {}).setdefault(method, run)
    return cells


def by_folder(source: str, run: dict) -> str:
    """:func:`gather`'s ``group`` by the name of the folder a run came from."""
    return Path(source).name


def text(run: dict | None) -> str:
    return "-" if run is None else f"{run['perplexity']:.1f} / {run['last10_perplexity']:.1f}"


def rates(run: dict | None) -> str:
    if run is None:
        return "-"
    r = detection_rates(run["tp"], run["fp"], run["fn"], run["tn"])
    return ("-" if math.isnan(r["tpr"]) else f"{r['tpr']:.2f}") + f" / {r['fpr']:.2f}"


def detects(run: dict) -> bool:
    """The issue's detection target: TPR at least 0.95 and FPR at most 0.05."""
    found = detection_rates(run["tp"], run["fp"], run["fn"], run["tn"])
    return found["tpr"] >= 0.95 and found["fpr"] <= 0.05


def worse(run: dict, than: dict) -> float:
    """How much worse ``run`` is than ``than`` at the worse of the best checkpoint and the last 10 rounds."""
    return max(run[k] / than[k] - 1 for k in ("perplexity", "last10_perplexity"))


def check(checks: dict, vote: str, key: tuple, cells: dict) -> None:
    """The plan's tests on one cell for one vote (added to ``checks``: test -> [(text, met)])."""
    family, partition, fraction, attack, seed = key
    cell = cells[key]
    ours, default, fedavg = cell[vote], cell.get("round"), cell.get("fedavg")
    clean = cells.get((family, partition, 0.0, "-", seed), {}).get("clean")
    name = f"{family} {partition} {fraction:.0%} {attack} seed {seed}"

    def add(test: str, text: str, met: bool) -> None:
        checks.setdefault(f"{vote}: {test}", []).append((f"{name}: {text}", met))

    if fraction == 0 and clean is not None:
        add(
            "without attackers, at most +1% against clean FedAvg",
            f"{worse(ours, clean):+.1%}",
            worse(ours, clean) <= 0.01,
        )
    if fraction == 0.2 and fedavg is not None:
        add("at 20%, at most 1% worse than FedAvg", f"{worse(ours, fedavg):+.1%}", worse(ours, fedavg) <= 0.01)
    if fraction == 0.2 and default is not None:
        add(
            "at 20%, fewer honest rejections than the default (in most cells)",
            f"{ours['fp']} against {default['fp']}",
            ours["fp"] < default["fp"],
        )
    if default is not None and (fraction == 0.4 or attack in AGAINST):
        add(
            "at 40% and under the attacks against it, at most 1% worse than the default",
            f"{worse(ours, default):+.1%}",
            worse(ours, default) <= 0.01,
        )
    if fraction == 0.4 and attack == "target_corruption":
        tpr = detection_rates(ours["tp"], ours["fp"], ours["fn"], ours["tn"])["tpr"]
        add("at 40%, TPR >= 0.95 under target corruption", f"{tpr:.2f}", tpr >= 0.95)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cells = gather(argv)
    print("Best checkpoint / last 10 rounds' perplexity; TPR / FPR of each vote (round: the default).\n")
    print(
        "| family | partition | malicious | attack | seed | clean | oracle | FedAvg | round | history | strong "
        "| TPR / FPR round | history | strong |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    checks: dict[str, list[tuple[str, bool]]] = {}
    for key in sorted(cells, key=lambda k: (k[2], k[0], k[1], k[3], k[4])):
        family, partition, fraction, attack, seed = key
        cell = cells[key]
        if not any(vote in cell for vote in VOTES):
            continue
        clean = cells.get((family, partition, 0.0, "-", seed), {}).get("clean")
        oracle = cells.get((family, partition, fraction, "-", seed), {}).get("oracle")
        runs = [cell.get(m) for m in ("fedavg", "round", *VOTES)]
        print(
            f"| {family} | {partition} | {fraction:.0%} | {attack} | {seed} | {text(clean)} | {text(oracle)} | "
            + " | ".join(text(run) for run in runs)
            + " | "
            + " | ".join(rates(cell.get(m)) for m in ("round", *VOTES))
            + " |"
        )
        for vote in VOTES:
            if vote in cell:
                check(checks, vote, key, cells)
    print("\n## The plan's tests\n")
    print_checks(dict(sorted(checks.items())), majority=tuple(t for t in checks if "in most cells" in t))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
