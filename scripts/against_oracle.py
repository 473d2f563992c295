"""A screening run beside its oracle, round by round: where the two kept the same clients, and how far apart they are.

For each ``FedLNS()`` run of the given family (with attackers) and its oracle (same family, partition, fraction and
seed; the oracle averages exactly the honest clients sampled), prints the rounds from activation on, the number in
which the run kept the oracle's clients, and the perplexity of both per round, with the largest one-round fall of
each. Where the two keep the same clients, what separates them is the model that the warm-up left, and how training
goes from there.

Usage: python scripts/against_oracle.py RUNS [RUNS ...] [--family F] [--method M] [--every K]
  (runs folders, archives or results folders holding one; F default bert, M default fedlns_default, K: print every
  K-th round, default 2)
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from fedlns_sim.runfiles import parse_records
from fedlns_sim.runstore import stored_runs


def gather(sources: list[str], family: str, method: str) -> dict:
    """(partition, fraction, attack, seed) -> {"run" | "oracle": records}, finished runs only."""
    cells: dict = {}
    for source in sources:
        for _name, files in stored_runs(source):
            config = json.loads(files["config.json"])["config"]
            records = parse_records(files["rounds.jsonl"])
            finished = records[-1]["round"] >= config["rounds"]
            if config["family"] != family or not config["malicious_fraction"] or not finished:
                continue
            if config["method"] == method:
                key = (config["partition"], config["malicious_fraction"], config.get("attack"), config["seed"])
                cells.setdefault(key, {})["run"] = records
            elif config["method"] == "oracle":
                key = (config["partition"], config["malicious_fraction"], None, config["seed"])
                cells.setdefault(key, {})["oracle"] = records
    oracles = {key[:2] + key[3:]: cell["oracle"] for key, cell in cells.items() if "oracle" in cell}
    return {
        key: {"run": cell["run"], "oracle": oracles[key[:2] + key[3:]]}
        for key, cell in cells.items()
        if "run" in cell and key[:2] + key[3:] in oracles
    }


def largest_fall(perplexity: list[float]) -> tuple[float, int]:
    """The largest fall of perplexity from one round to the next, and the round it fell into."""
    falls = -np.diff(perplexity)
    at = int(np.argmax(falls))
    return float(falls[at]), at + 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--family", default="bert")
    parser.add_argument("--method", default="fedlns_default")
    parser.add_argument("--every", type=int, default=2)
    args = parser.parse_args(argv)
    for (partition, fraction, attack, seed), cell in sorted(gather(args.runs, args.family, args.method).items()):
        run, oracle = cell["run"], {r["round"]: r for r in cell["oracle"]}
        active = [r for r in run if r["round"] >= 1 and r.get("active") and r.get("decided")]
        same = [r["round"] for r in active if set(map(str, r["kept"])) == set(map(str, oracle[r["round"]]["kept"]))]
        curves = [[r["perplexity"] for r in records] for records in (run, cell["oracle"])]
        (run_fall, run_at), (oracle_fall, oracle_at) = (largest_fall(curve) for curve in curves)
        print(f"\n## {args.family} {partition} {100 * fraction:.0f}% {attack} seed {seed}\n")
        print(
            f"kept the oracle's clients in {len(same)} of {len(active)} rounds from activation (round "
            f"{active[0]['round'] if active else '-'}); largest one-round fall: run {run_fall:.1f} into round "
            f"{run_at}, oracle {oracle_fall:.1f} into round {oracle_at}; best: run {min(curves[0][1:]):.1f}, oracle "
            f"{min(curves[1][1:]):.1f}\n"
        )
        print("| round | run | oracle | same clients |")
        print("|---:|---:|---:|---|")
        for record in run[:: args.every]:
            round_ = record["round"]
            print(
                f"| {round_} | {record['perplexity']:.1f} | {oracle[round_]['perplexity']:.1f} | "
                f"{'yes' if round_ in same else '-'} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
