"""The retain-rule targets of ``docs/rules.md`` for ``FedLNS.for_federation``, with the paper's rule beside it.

Run: ``python benchmarks/rule_targets.py --seeds 0 1 2 3 4`` (prints a markdown table).

Each federation is ``fedlns_core._synthetic.SyntheticFederation`` (D=640, attackers shifted by 1.5 noise
scales, as ``tests/test_scenarios.py``), screened for ``--rounds`` rounds through :meth:`FedLNS.screen`
itself (bank, activation, rule: nothing re-implemented). ``for_federation`` is given the assumed bound
(25% for K=20, 40% for K=200) whatever the true fraction; the paper's rule runs with the same planned
activation threshold, so only the retain rule differs. Rates are pooled over the active rounds of all
seeds; the range is over seeds.
"""

from __future__ import annotations

import argparse

from fedlns_core import FedLNS
from fedlns_core._synthetic import SyntheticFederation

#: (K, N per round, assumed bound, true fraction, min TPR, max FPR)
TARGETS = ((20, 4, 0.25, 0.25, 0.9, 0.05), (200, 20, 0.4, 0.0, None, 0.02), (200, 20, 0.4, 0.4, 0.98, 0.02))


def measure(n_clients, per_round, bound, fraction, seed, rounds, rule, solver="sklearn"):
    """(tp, fn, fp, tn) over the active rounds of one federation."""
    federation = SyntheticFederation(n_clients, fraction, n_layers=2, width=64, seed=seed)
    screener = FedLNS.for_federation(n_clients, per_round, bound, random_state=seed, mixture_solver=solver)
    if rule == "paper":
        screener.retain_rule = "paper"
    tp = fn = fp = tn = 0
    for round_index in range(rounds):
        models, counts = federation.sample_round(round_index, participation=per_round / n_clients)
        result = screener.screen(federation.global_params, models, counts)
        if not result.active:
            continue
        for client_id in models:
            bad, out = client_id in federation.malicious, client_id in result.rejected
            tp, fn, fp, tn = tp + (bad and out), fn + (bad and not out), fp + (out and not bad), tn + (not bad and not out)
    return tp, fn, fp, tn


def rate(hits, misses):
    return hits / (hits + misses) if hits + misses else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--solver", choices=("sklearn", "fast"), default="sklearn",
                        help="mixture solver (default: sklearn, the one docs/rules/targets.md was measured with)")
    args = parser.parse_args(argv)
    print(f"Seeds {args.seeds}, {args.rounds} rounds per federation, mixture solver {args.solver}.\n")
    print("| K | per round | assumed bound | true fraction | target | rule | TPR (seeds) | FPR (seeds) | met |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n_clients, per_round, bound, fraction, min_tpr, max_fpr in TARGETS:
        target = (f"TPR >= {min_tpr}, " if min_tpr else "") + f"FPR <= {max_fpr}"
        for rule in ("picked", "paper"):
            counts = [measure(n_clients, per_round, bound, fraction, seed, args.rounds, rule, args.solver) for seed in args.seeds]
            tp, fn, fp, tn = (sum(c[k] for c in counts) for k in range(4))
            tpr, fpr = rate(tp, fn), rate(fp, tn)
            seed_tpr = [rate(c[0], c[1]) for c in counts if c[0] + c[1]]
            seed_fpr = [rate(c[2], c[3]) for c in counts]
            met = fpr <= max_fpr and (min_tpr is None or tpr >= min_tpr)
            tpr_text = "--" if tpr is None else f"{tpr:.3f} ({min(seed_tpr):.2f}-{max(seed_tpr):.2f})"
            picked = FedLNS.for_federation(n_clients, per_round, bound)
            name = (f"`for_federation` ({picked.retain_rule}, min_separation {picked.min_separation:g})"
                    if rule == "picked" else "paper rule, same threshold")
            print(f"| {n_clients} | {per_round} | {bound:.0%} | {fraction:.0%} | {target} | {name} | {tpr_text} | "
                  f"{fpr:.3f} ({min(seed_fpr):.3f}-{max(seed_fpr):.3f}) | {'yes' if met else 'no'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
