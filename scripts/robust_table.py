"""The robustness matrix of ``FedLNS()`` (the simulator's ``fedlns_default``) and its targets, as Markdown.

Joins the archived attack matrix (``docs/results/attacks/``: every method under the twelve original attacks,
GPT IID, seeds 100-300) with the runs made by ``scripts/results_robust.sh`` (the support rule, ``FedLNS()``'s default
then, everywhere, every method under the three attacks written against it, non-IID GPT and IID LLaMA) and by
``scripts/results_cohort.sh`` (the cohort rule, the default now, on the same cells and under ``majority_only``):
runs folders, or results folders holding their archives (``docs/results/robust``, ``docs/results/cohort``). The
rule in the ``FedLNS()`` column is ``--ours``: ``fedlns_default`` (the cohort rule, default) or ``fedlns_support``
(the support rule: the table ``docs/results/robust`` was made with); with the cohort rule the support rule is shown
beside it and counts as one of the other defences. Every number is a run's summary as the report computes
it (``fedlns_sim.report.load.load_runs``: best checkpoint, and the perplexity of the last ten rounds' mean loss),
averaged over the seeds given; a cell is shown only when every method in it has every seed.

The targets checked (for GPT IID, the twelve original attacks and the three new ones at 20% and 40%):

* never worse than no defence: ``FedLNS()``'s mean at most 1% above FedAvg's, best and last 10, and at no seed
  more than 5% above FedAvg's at that seed;
* ahead of every peer: its mean best within 2% of the best defence's in at least 20 of the 24 original cells;
* the paper's attack at 40% within 5% of the oracle;
* TPR >= 0.9 and FPR <= 0.05 under ``target_corruption``, ``norm_freeze`` and ``ipm`` at 20% and 40%;
* clean cost: without attackers, paired by seed against clean FedAvg, mean at most +1% and the 95% interval's
  upper end at most +3%.

Usage: python scripts/robust_table.py RUNS [RUNS ...] [--seeds S] [--ours M]   (RUNS: runs folders or results
folders such as docs/results/robust, a later one's run replacing an earlier one's of the same cell and seed; S:
comma-separated, default 100,200,300; M: fedlns_default, the default, or fedlns_support)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

from fedlns_sim.report.load import load_runs

ROOT = Path(__file__).resolve().parent.parent
ORIGINAL = ("target_corruption", "backdoor", "sign_flip", "scaling", "gaussian", "alie", "ipm", "minmax",
            "norm_mimicry", "norm_freeze", "decoy", "delta_budget")
NEW = ("norm_noise", "band_mimic", "ipm_search", "majority_only")
DETECTED = ("target_corruption", "norm_freeze", "ipm")
DEFENCES = {"norm_bounded_fedavg": "Norm-Bound", "coordinate_median": "Median", "trimmed_mean": "Trimmed",
            "multi_krum": "Multi-Krum", "flame": "FLAME", "fedlns": "FedLNS.paper()",
            "fedlns_multi_krum": "paper+Multi-Krum", "fedlns_median": "paper+Median",
            "fedlns_norm_bound": "paper+Norm-Bound", "fedlns_support": "support rule"}
SETTINGS = (("gpt", "iid"), ("gpt", "noniid"), ("llama", "iid"))
COLUMN_NAMES = {"fedavg": "FedAvg", "flame": "FLAME", "fedlns": "FedLNS.paper()", "fedlns_support": "support rule",
                "fedlns_default": "FedLNS()"}


def gather(runs_dirs: list[Path], seeds: tuple[int, ...]) -> dict:
    """(family, partition, method, fraction, attack) -> {seed: run summary}; without attackers the attack is "-".
    A run of a later folder replaces an earlier one's of the same cell and seed (the attack matrix comes first)."""
    cells: dict = defaultdict(dict)
    for folder in (ROOT / "docs/results/attacks", *runs_dirs):
        for run in load_runs(folder):
            if run["seed"] in seeds:
                attack = run["attack"] if run["fraction"] > 0 else "-"
                key = (run["family"], run["partition"], run["method"], run["fraction"], attack)
                cells[key][run["seed"]] = run
    return cells


def shown(value: float) -> str:
    return "diverged" if not math.isfinite(value) or value > 1e5 else f"{value:.0f}"


def mean_of(runs: dict, seeds, field: str) -> float:
    """The mean over the seeds; infinite where a seed diverged (non-finite, or above 1e5)."""
    values = [runs[seed][field] for seed in seeds]
    return math.inf if not all(math.isfinite(v) and v <= 1e5 for v in values) else float(np.mean(values))


def excess(ours: float, theirs: float) -> float:
    """Percent above; a diverged reference counts as any finite value being below it."""
    ours, theirs = (math.inf if not math.isfinite(v) or v > 1e5 else v for v in (ours, theirs))
    if math.isinf(theirs):
        return -math.inf if math.isfinite(ours) else 0.0
    return 100 * (ours / theirs - 1) if math.isfinite(ours) else math.inf


def percent(value: float) -> str:
    return "-" if math.isinf(value) and value < 0 else ("+inf" if math.isinf(value) else f"{value:+.1f}%")


def against_fedavg(ours: dict, fedavg: dict, seeds) -> tuple[dict, float, float, float]:
    """FedLNS()'s excess over FedAvg (mean, best and last 10), its worst seed, and its TPR and FPR."""
    vs = {field: excess(mean_of(ours, seeds, field), mean_of(fedavg, seeds, field))
          for field in ("perplexity", "last10_perplexity")}
    worst = max(excess(ours[s][f], fedavg[s][f]) for s in seeds for f in ("perplexity", "last10_perplexity"))
    tp, fn, fp, tn = (sum(ours[s][k] for s in seeds) for k in ("tp", "fn", "fp", "tn"))
    return vs, worst, tp / max(tp + fn, 1), fp / max(fp + tn, 1)


def check(targets: dict, cell: str, attack: str, vs: dict, worst: float, tpr: float, fpr: float) -> None:
    """Record the cell's misses of "never worse than FedAvg" and of the detection target."""
    if max(vs.values()) > 1.0 or worst > 5.0:
        targets["worse than FedAvg"].append(f"{cell} (mean {percent(max(vs.values()))}, worst seed {percent(worst)})")
    if attack in DETECTED and (tpr < 0.9 or fpr > 0.05):
        targets["detection"].append(f"{cell} (TPR {tpr:.2f}, FPR {fpr:.2f})")


def gpt_iid_tables(cells: dict, seeds: tuple[int, ...], lines: list[str], targets: dict, ours_method: str) -> None:
    complete = lambda key: key in cells and all(s in cells[key] for s in seeds)  # noqa: E731
    for fraction in (0.4, 0.2):
        oracle = cells.get(("gpt", "iid", "oracle", fraction, "target_corruption"))
        if not oracle or not complete(("gpt", "iid", "oracle", fraction, "target_corruption")):
            continue
        lines += [f"\n**{fraction:.0%} malicious** (oracle {shown(mean_of(oracle, seeds, 'perplexity'))} / "
                  f"{shown(mean_of(oracle, seeds, 'last10_perplexity'))})\n",
                  "| attack | FedAvg | best other defence | FedLNS.paper() | FedLNS() | vs FedAvg (best / last 10; "
                  "worst seed) | vs best other defence | TPR / FPR |",
                  "|---|---:|---|---:|---:|---:|---:|---:|"]
        for attack in ORIGINAL + NEW:
            key = lambda method: ("gpt", "iid", method, fraction, attack)  # noqa: E731
            if not (complete(key("fedavg")) and complete(key(ours_method))):
                continue
            fedavg, ours = cells[key("fedavg")], cells[key(ours_method)]
            paper = cells[key("fedlns")] if complete(key("fedlns")) else None
            others = [(mean_of(cells[key(m)], seeds, "perplexity"), m) for m in DEFENCES
                      if m != ours_method and complete(key(m))]
            if not others:
                continue
            best_other = min(others)
            vs, worst, tpr, fpr = against_fedavg(ours, fedavg, seeds)
            vs_best = excess(mean_of(ours, seeds, "perplexity"), best_other[0])   # negative: ahead of every peer
            lines.append(
                f"| `{attack}` | {shown(mean_of(fedavg, seeds, 'perplexity'))} / "
                f"{shown(mean_of(fedavg, seeds, 'last10_perplexity'))} | {DEFENCES[best_other[1]]} "
                f"{shown(best_other[0])} | {both(paper, seeds)} | {shown(mean_of(ours, seeds, 'perplexity'))} / "
                f"{shown(mean_of(ours, seeds, 'last10_perplexity'))} | {percent(vs['perplexity'])} / "
                f"{percent(vs['last10_perplexity'])}; {percent(worst)} | {percent(vs_best)} | {tpr:.2f} / {fpr:.2f} |")
            cell = f"{attack} {fraction:.0%}"
            check(targets, f"GPT IID {cell}", attack, vs, worst, tpr, fpr)
            if attack in ORIGINAL and paper is not None:
                targets["original cells"] += 1
                if vs_best <= 2.0:                                           # within 2% of the best, or the best
                    targets["within 2%"] += 1
                else:
                    targets["not within 2%"].append(f"{cell} ({percent(vs_best)} vs {DEFENCES[best_other[1]]})")
            if attack == "target_corruption" and fraction == 0.4:
                targets["paper attack vs oracle"] = excess(mean_of(ours, seeds, "perplexity"),
                                                           mean_of(oracle, seeds, "perplexity"))


def small_tables(cells: dict, seeds: tuple[int, ...], lines: list[str], targets: dict, ours_method: str) -> None:
    """Non-IID GPT and IID LLaMA: FedAvg, FLAME, the paper's rule and FedLNS() under the attacks run there."""
    complete = lambda key: key in cells and all(s in cells[key] for s in seeds)  # noqa: E731
    columns = ("fedavg", "flame", "fedlns", "fedlns_support")      # with the cohort rule, the rule before it beside it
    columns += ("fedlns_default",) if ours_method == "fedlns_default" else ()
    for family, partition in SETTINGS[1:]:
        rows = []
        for fraction in (0.4, 0.2):
            for attack in DETECTED + NEW:
                key = lambda method: (family, partition, method, fraction, attack)  # noqa: E731
                if not (complete(key("fedavg")) and complete(key(ours_method))):
                    continue
                shown_runs = [both(cells[key(m)] if complete(key(m)) else None, seeds) for m in columns]
                ours, fedavg = cells[key(ours_method)], cells[key("fedavg")]
                vs, worst, tpr, fpr = against_fedavg(ours, fedavg, seeds)
                vs_flame = (percent(excess(mean_of(ours, seeds, "perplexity"),
                                           mean_of(cells[key("flame")], seeds, "perplexity")))
                            if complete(key("flame")) else "-")
                rows.append(f"| {fraction:.0%} `{attack}` | " + " | ".join(shown_runs)
                            + f" | {percent(vs['perplexity'])} / {percent(vs['last10_perplexity'])}; {percent(worst)}"
                            + f" | {vs_flame} | {tpr:.2f} / {fpr:.2f} |")
                check(targets, f"{family.upper()} {partition} {attack} {fraction:.0%}", attack, vs, worst, tpr, fpr)
        if rows:
            lines += [f"\n**{family.upper()} {partition}**\n",
                      "| cell | " + " | ".join(COLUMN_NAMES[m] for m in columns) + " | vs FedAvg (best / last 10; "
                      "worst seed) | vs FLAME (best) | TPR / FPR |",
                      "|---|" + "---:|" * (len(columns) + 3), *rows]


def clean_cost(cells: dict, seeds: tuple[int, ...], lines: list[str], targets: dict, ours_method: str) -> None:
    for family, partition in SETTINGS:
        fedavg = cells.get((family, partition, "fedavg", 0.0, "-"), {})
        ours = cells.get((family, partition, ours_method, 0.0, "-"), {})
        paired = [s for s in seeds if s in fedavg and s in ours]
        if not paired:
            continue
        for field, label in (("perplexity", "best"), ("last10_perplexity", "last 10")):
            diffs = np.array([excess(ours[s][field], fedavg[s][field]) for s in paired])
            mean = float(diffs.mean())
            upper = (mean + stats.t.ppf(0.975, len(diffs) - 1) * diffs.std(ddof=1) / np.sqrt(len(diffs))
                     if len(diffs) > 1 else math.nan)
            lines.append(f"- {family} {partition}, {label}: {mean:+.2f}% (95% interval upper end {upper:+.2f}%; "
                         f"seeds {', '.join(map(str, paired))}: {', '.join(f'{d:+.2f}%' for d in diffs)})")
            if (family, partition) == ("gpt", "iid"):
                targets["clean"].append((label, mean, upper))


def both(runs: dict | None, seeds) -> str:
    """Best / last-10 mean over the seeds, or "-" without the runs."""
    if runs is None:
        return "-"
    return f"{shown(mean_of(runs, seeds, 'perplexity'))} / {shown(mean_of(runs, seeds, 'last10_perplexity'))}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--seeds", default="100,200,300")
    parser.add_argument("--ours", choices=("fedlns_default", "fedlns_support"), default="fedlns_default")
    args = parser.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    cells = gather(args.runs, seeds)
    targets: dict = {"worse than FedAvg": [], "not within 2%": [], "detection": [], "clean": [],
                     "original cells": 0, "within 2%": 0, "paper attack vs oracle": math.nan}
    lines = [f"Seeds {', '.join(map(str, seeds))}; best / last-10 perplexity, means over the seeds."]
    gpt_iid_tables(cells, seeds, lines, targets, args.ours)
    small_tables(cells, seeds, lines, targets, args.ours)
    lines.append("\n**Without attackers**, FedLNS() against clean FedAvg, paired by seed:\n")
    clean_cost(cells, seeds, lines, targets, args.ours)
    lines += ["\n**Targets** (never worse than FedAvg and detection: every setting shown; the rest GPT IID):\n",
              f"- never worse than FedAvg (mean +1%, any seed +5%): "
              f"{'met' if not targets['worse than FedAvg'] else 'missed in ' + '; '.join(targets['worse than FedAvg'])}",
              f"- within 2% of the best defence in {targets['within 2%']} of {targets['original cells']} original "
              f"cells (target 20 of 24){'' if not targets['not within 2%'] else ': not in ' + '; '.join(targets['not within 2%'])}",
              f"- the paper's attack at 40%: {percent(targets['paper attack vs oracle'])} above the oracle (target +5%)",
              f"- TPR >= 0.9, FPR <= 0.05 under {', '.join(DETECTED)}: "
              f"{'met' if not targets['detection'] else 'missed in ' + '; '.join(targets['detection'])}",
              *(f"- clean cost, {label}: {mean:+.2f}% (target +1%), 95% upper end {upper:+.2f}% (target +3%)"
                for label, mean, upper in targets["clean"])]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
