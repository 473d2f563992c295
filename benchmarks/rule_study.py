"""Measure retain rules for small and clean rounds against the paper's rule.

Run (writes raw counts, then the table from those files only)::

    python benchmarks/rule_study.py --seeds 0 1 2 3 4 --out docs/rules/selection.json
    python benchmarks/rule_study.py --seeds 100 101 102 103 104 --out docs/rules/report.json
    python benchmarks/rule_study.py --table docs/rules/selection.json docs/rules/report.json

(The committed files were measured in two steps: the four sizes above first, then K=100 with 10 per round with
``--sizes 100x10`` into ``docs/rules/{selection,report}-100x10.json``; ``--table`` joins comma-separated files.
The first two commands measure all five sizes at once.)

Federations come from ``fedlns_core._synthetic.SyntheticFederation`` (2 blocks x 64 wide, D=640, attack
shift 1.5 noise scales, as ``tests/test_scenarios.py``). Each round samples N of K clients uniformly,
refreshes a latest-signature bank before screening (as ``FedLNS`` with ``ema=0``) and, once the bank
holds K/2 ids (activation at 50% coverage), standardizes the round and the bank against the bank's
median/MAD and asks every rule which clients to keep. Rules never change the bank or the data, so all of
them judge the very same rounds. Scenarios per (K, N): Gaussian and Student-t (3 degrees of freedom)
benign noise at 0/10/25/40% malicious, and a decoy (25% malicious plus one extreme attacker, 8x the
shift, in every round).

Selection rule, fixed before any result was seen: on the selection seeds, for each round size keep the
variants that meet the targets that apply to it (K=20/N=4, Gaussian, 25%: TPR >= 0.9 and FPR
<= 0.05; K=200/N=20, Gaussian, 0%: FPR <= 0.02 and 40%: TPR >= 0.98, FPR <= 0.02), or all of them if
none does; among those, pick the lowest cost = mean over the nine scenarios of FPR + (1 - TPR) (the TPR
term only where attackers take part); a variant within 0.005 of the best loses only to one listed
earlier (simpler first). The report seeds are disjoint and only reported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np

from fedlns_core import __version__
from fedlns_core._robust import median_mad, standardize
from fedlns_core._rules import (bank_mixture_rule, benign_spread, fresh_entries, guarded_rule, paper_rule, peeled,
                                score_rule, separated)
from fedlns_core._synthetic import SyntheticFederation

SIZES = ((200, 20), (100, 10), (50, 5), (20, 4), (10, 2))
FRACTIONS = (0.0, 0.1, 0.25, 0.4)
SCENARIOS = [(noise, fraction) for noise in ("gauss", "t3") for fraction in FRACTIONS] + [("decoy", 0.25)]
SEPARATIONS = (2, 3, 4)
GUARDS = ((3, 0), (3, 1), (3, 2), (4, 0), (4, 1))   # (lone_separation, min_separation) of the guarded rule
ROUNDS = 25
MAD_FLOOR = 1e-6
DECOY_SHIFT = 8.0
TARGETS = {  # (K, N, scenario) -> (min TPR, max FPR)
    (20, 4, "gauss", 0.25): (0.9, 0.05),
    (200, 20, "gauss", 0.0): (None, 0.02),
    (200, 20, "gauss", 0.4): (0.98, 0.02),
}


def variant_names() -> list[str]:
    """Every variant, simplest first (the tie-break order)."""
    names = ["paper"] + [f"paper+sep{s}" for s in SEPARATIONS]
    names += ["scores"] + [f"scores+sep{s}" for s in SEPARATIONS]
    names += ["bank"] + [f"bank+sep{s}" for s in SEPARATIONS]
    names += [f"peel(paper+sep{s})" for s in SEPARATIONS] + [f"peel(bank+sep{s})" for s in SEPARATIONS]
    names += ["age"]
    names += [f"guarded(L{l},S{s})" for l, s in GUARDS]
    return names


def judge(features, bank_features, aged_features, seed, solver="sklearn") -> dict[str, np.ndarray]:
    """Retained mask (N,) of every variant for one round."""
    fit = dict(random_state=seed, solver=solver)
    keep_all = np.ones(features.shape[0], dtype=bool)
    spread = benign_spread(bank_features, **fit)
    paper = paper_rule(features, **fit)
    scores = score_rule(features, **fit)
    bank = bank_mixture_rule(features, bank_features, **fit)
    out = {"paper": paper.retained, "scores": scores.retained, "bank": bank.retained,
           "age": paper_rule(aged_features, **fit).retained}
    for s in SEPARATIONS:
        out[f"paper+sep{s}"] = separated(paper, features, spread, s).retained
        out[f"scores+sep{s}"] = separated(scores, features, spread, s).retained
        # the same fit as `bank`, with the guard applied: a split below s keeps everyone
        out[f"bank+sep{s}"] = bank.retained if (bank.separation or 0.0) >= s else keep_all
        out[f"peel(paper+sep{s})"] = peeled(
            lambda rows, s=s: separated(paper_rule(rows, **fit), rows, spread, s), features).retained
        out[f"peel(bank+sep{s})"] = bank_mixture_rule(features, bank_features, min_separation=s, peel_steps=3,
                                                      **fit).retained
    for lone, gap in GUARDS:
        out[f"guarded(L{lone},S{gap})"] = guarded_rule(features, bank_features, lone_separation=lone,
                                                       min_separation=gap, **fit).retained
    return out


def run_scenario(n_clients, per_round, noise, fraction, seed, solver="sklearn"):
    """Counts {variant: [tp, fn, fp, tn]} over the active rounds of one federation."""
    federation = SyntheticFederation(n_clients, fraction, n_layers=2, width=64, seed=seed,
                                     noise_df=3.0 if noise == "t3" else None)
    rng = federation.rng
    decoy = min(federation.malicious) if noise == "decoy" and federation.malicious else None
    threshold = n_clients // 2
    max_age = math.ceil(2 * n_clients / per_round)          # two expected revisits
    bank: dict[int, tuple[np.ndarray, int]] = {}
    counts = defaultdict(lambda: [0, 0, 0, 0])
    active = 0
    for round_index in range(ROUNDS):
        ids = [int(i) for i in rng.choice(n_clients, per_round, replace=False)]
        if decoy is not None and decoy not in ids:
            ids[0] = decoy
        ids.sort()
        signatures = np.array([federation.signature(i, round_index) for i in ids])           # (N, D)
        if decoy is not None:
            signatures[ids.index(decoy)] += (DECOY_SHIFT - 1) * federation.attack_direction
        for client_id, signature in zip(ids, signatures):
            bank[client_id] = (signature, round_index)
        if len(bank) < threshold:
            continue
        active += 1
        bank_ids = sorted(bank)
        columns = np.array([bank[i][0] for i in bank_ids]).T                                 # (D, B)
        median, mad = median_mad(columns, MAD_FLOOR)
        features, bank_features = standardize(signatures, median, mad), standardize(columns.T, median, mad)
        ages = np.array([round_index - bank[i][1] for i in bank_ids])
        fresh = fresh_entries(ages, max_age, threshold)
        aged_features = standardize(signatures, *median_mad(columns[:, fresh], MAD_FLOOR))
        round_seed = int(np.random.SeedSequence([seed, round_index]).generate_state(1)[0])
        attackers = np.array([i in federation.malicious for i in ids])
        for name, retained in judge(features, bank_features, aged_features, round_seed, solver).items():
            tally = counts[name]
            tally[0] += int(np.sum(attackers & ~retained))
            tally[1] += int(np.sum(attackers & retained))
            tally[2] += int(np.sum(~attackers & ~retained))
            tally[3] += int(np.sum(~attackers & retained))
    return dict(counts), active


def provenance() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        commit = ""
    return {"version": __version__, "commit": commit, "command": " ".join(sys.argv)}


def measure(seeds, out_path, sizes=SIZES, solver="sklearn") -> None:
    records = []
    started = time.time()
    for n_clients, per_round in sizes:
        for noise, fraction in SCENARIOS:
            for seed in seeds:
                counts, active = run_scenario(n_clients, per_round, noise, fraction, seed, solver)
                records.append(dict(K=n_clients, N=per_round, noise=noise, fraction=fraction, seed=seed,
                                    active_rounds=active, counts=counts))
                print(f"K={n_clients} N={per_round} {noise} {fraction} seed {seed}: {active} active rounds "
                      f"({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    result = dict(provenance(), seeds=list(seeds), rounds=ROUNDS, sizes=list(sizes), records=records)
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    temporary = out_path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(result, handle, indent=1)
    os.replace(temporary, out_path)


# ------------------------------------------------------------------------------------------ the table
def rates(records, variant):
    """Pooled TPR/FPR, and per-seed min/max, over records of one scenario."""
    tp, fn, fp, tn = (sum(record["counts"][variant][k] for record in records) for k in range(4))
    per_seed = [record["counts"][variant] for record in records]
    tpr = tp / (tp + fn) if tp + fn else None
    fpr = fp / (fp + tn) if fp + tn else None
    seed_tpr = [c[0] / (c[0] + c[1]) for c in per_seed if c[0] + c[1]]
    seed_fpr = [c[2] / (c[2] + c[3]) for c in per_seed if c[2] + c[3]]
    return tpr, fpr, seed_tpr, seed_fpr


def grouped(data):
    groups = defaultdict(list)
    for record in data["records"]:
        groups[(record["K"], record["N"], record["noise"], record["fraction"])].append(record)
    return groups


def cost(groups, n_clients, per_round, variant):
    total = 0.0
    for noise, fraction in SCENARIOS:
        tpr, fpr, _, _ = rates(groups[(n_clients, per_round, noise, fraction)], variant)
        total += fpr + (0.0 if tpr is None else 1.0 - tpr)
    return total / len(SCENARIOS)


def meets_targets(groups, n_clients, per_round, variant):
    for (k, n, noise, fraction), (min_tpr, max_fpr) in TARGETS.items():
        if (k, n) != (n_clients, per_round):
            continue
        tpr, fpr, _, _ = rates(groups[(k, n, noise, fraction)], variant)
        if fpr > max_fpr or (min_tpr is not None and tpr < min_tpr):
            return False
    return True


def choose(groups, n_clients, per_round):
    names = variant_names()
    eligible = [name for name in names if meets_targets(groups, n_clients, per_round, name)] or names
    best = min(cost(groups, n_clients, per_round, name) for name in eligible)
    return next(name for name in eligible if cost(groups, n_clients, per_round, name) <= best + 0.005)


def cell(records, variant):
    tpr, fpr, seed_tpr, seed_fpr = rates(records, variant)
    text = "--" if tpr is None else f"{tpr:.2f}"
    if seed_tpr and len(seed_tpr) > 1:
        text += f" ({min(seed_tpr):.2f}-{max(seed_tpr):.2f})"
    text += f" / {fpr:.3f}"
    if len(seed_fpr) > 1:
        text += f" ({min(seed_fpr):.3f}-{max(seed_fpr):.3f})"
    return text


def load(paths: str) -> dict:
    """One measured file, or several (comma-separated, e.g. sizes measured later) with their records joined."""
    parts = []
    for path in paths.split(","):
        with open(path) as handle:
            parts.append(json.load(handle))
    joined = dict(parts[0], records=[r for part in parts for r in part["records"]])
    joined["commit"] = ",".join(dict.fromkeys(part["commit"][:10] for part in parts))
    return joined


def table(selection_path, report_path) -> str:
    selection, report = load(selection_path), load(report_path)
    chosen_groups, report_groups = grouped(selection), grouped(report)
    lines = [f"Selection seeds {selection['seeds']}, report seeds {report['seeds']}; {report['rounds']} rounds "
             f"per federation; fedlns-core {report['version']} at commit {report['commit'] or '?'}.", ""]
    sizes = [size for size in SIZES if any((r["K"], r["N"]) == size for r in report["records"])]
    for n_clients, per_round in sizes:
        pick = choose(chosen_groups, n_clients, per_round)
        lines += [f"### K={n_clients}, {per_round} per round (activation at {n_clients // 2})", "",
                  f"Chosen on the selection seeds: **{pick}**. Cost on selection / report seeds shown last.", ""]
        header = ["rule"] + [f"{noise} {fraction:.0%}" for noise, fraction in SCENARIOS] + ["cost sel.", "cost rep.",
                                                                                          "targets (rep.)"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for name in variant_names():
            row = [f"**{name}**" if name == pick else name]
            row += [cell(report_groups[(n_clients, per_round, noise, fraction)], name) for noise, fraction in SCENARIOS]
            row += [f"{cost(chosen_groups, n_clients, per_round, name):.3f}",
                    f"{cost(report_groups, n_clients, per_round, name):.3f}"]
            applies = any((k, n) == (n_clients, per_round) for k, n, *_ in TARGETS)
            row.append(("met" if meets_targets(report_groups, n_clients, per_round, name) else "missed")
                       if applies else "")
            lines.append("| " + " | ".join(row) + " |")
        active = [record["active_rounds"] for record in report["records"]
                  if (record["K"], record["N"]) == (n_clients, per_round)]
        lines += ["", f"Active rounds per federation: {min(active)}-{max(active)}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", help="federation seeds to measure")
    parser.add_argument("--out", help="JSON file for the raw counts")
    parser.add_argument("--sizes", nargs="+", metavar="KxN", help="only these federation sizes (e.g. 100x10)")
    parser.add_argument("--solver", choices=("sklearn", "fast"), default="sklearn",
                        help="mixture solver (default: sklearn, the one docs/rules was measured with)")
    parser.add_argument("--table", nargs=2, metavar=("SELECTION", "REPORT"),
                        help="print the markdown table from measured files (each may be a comma-separated list)")
    args = parser.parse_args(argv)
    if args.table:
        print(table(*args.table))
    elif args.seeds and args.out:
        sizes = SIZES if not args.sizes else [tuple(int(v) for v in size.split("x")) for size in args.sizes]
        measure(args.seeds, args.out, sizes, args.solver)
    else:
        parser.error("give --seeds and --out to measure, or --table SELECTION REPORT")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
