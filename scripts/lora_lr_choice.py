"""The `lora` preset's learning rate for a family, chosen by the criteria of docs/results/lora-matrix/PLAN.md.

Reads the FedAvg runs of ``scripts/results_lora_matrix.sh lr`` (clean and at 40%, selection seeds 11 and 12, one
learning rate per run) and prints, per family and learning rate, each seed's clean perplexity (best / last 10), its
improvement on the base model, FedAvg's cost under the attack at the best checkpoint, and whether the criteria hold:

* clean FedAvg improves on the base model (round 0) by at least 25%;
* the 40% attack costs FedAvg at least 15% at the best checkpoint (room for a defence);
* at least 25,000 evaluation positions.

The choice is the learning rate with the lowest mean clean perplexity among those meeting every criterion on both
seeds (at least 8 optimizer steps per client and round holds for the preset itself: see the plan). Where no rate
meets them, the plan runs the family at the rate closest to meeting them: here, the smallest shortfall summed over the
two percentage criteria (points short of 25% and of 15%), averaged over the seeds.

Usage: python scripts/lora_lr_choice.py RUNS_DIR
"""

from __future__ import annotations

import sys
from collections import defaultdict

from fedlns_sim.report.load import load_runs


def main(argv: list[str]) -> int:
    runs = load_runs(argv[0])
    rates = defaultdict(dict)  # (family, learning rate) -> {(seed, fraction): run}
    closest = {}  # family -> (learning rate, mean shortfall in points)
    for run in runs:
        rates[run["family"], run["learning_rate"]][run["seed"], run["fraction"]] = run
    print("| family | learning rate | seed | clean best / last 10 | vs base | attack cost (best) | criteria |")
    print("|---|---|---|---|---|---|---|")
    chosen = {}
    for (family, rate), cells in sorted(rates.items()):
        seeds = sorted({seed for seed, _ in cells})
        ok_all, cleans, shortfalls = True, [], []
        for seed in seeds:
            clean, attacked = cells.get((seed, 0.0)), cells.get((seed, 0.4))
            if clean is None or attacked is None:
                ok_all = False
                continue
            improvement = 1 - clean["perplexity"] / clean["initial_perplexity"]
            cost = attacked["perplexity"] / clean["perplexity"] - 1
            ok = improvement >= 0.25 and cost >= 0.15 and (clean["eval_positions"] or 0) >= 25_000
            ok_all &= ok
            shortfalls.append(100 * (max(0.0, 0.25 - improvement) + max(0.0, 0.15 - cost)))
            cleans.append(clean["perplexity"])
            print(
                f"| {family} | {rate:g} | {seed} | {clean['perplexity']:.1f} / {clean['last10_perplexity']:.1f} | "
                f"-{100 * improvement:.1f}% | +{100 * cost:.1f}% | {'met' if ok else 'missed'} |"
            )
        if len(shortfalls) == 2 and (family not in closest or sum(shortfalls) / 2 < closest[family][1]):
            closest[family] = (rate, sum(shortfalls) / 2)
        if ok_all and len(cleans) == 2:
            mean = sum(cleans) / 2
            if family not in chosen or mean < chosen[family][1]:
                chosen[family] = (rate, mean)
    for family, (rate, mean) in sorted(chosen.items()):
        print(f"\n{family}: learning_rate={rate:g} (mean clean best perplexity {mean:.1f})")
    for family, (rate, shortfall) in sorted(closest.items()):
        if family not in chosen:
            print(
                f"\n{family}: no rate meets the criteria; closest: learning_rate={rate:g} "
                f"({shortfall:.1f} points short, mean over the seeds)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
