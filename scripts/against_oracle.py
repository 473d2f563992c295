"""A screening run beside its oracle, round by round: where the two kept the same clients, how far apart they end.

For each ``FedLNS()`` run of the given family (with attackers) and its oracle (same family, partition, fraction and
seed; the oracle averages exactly the honest clients sampled), prints the rounds from activation on, the number in
which the run kept the oracle's clients, and the perplexity of both per round, with the largest one-round fall of each
from activation on. Where the two keep the same clients, what separates them is the model that the warm-up left, and
how training goes from there.

Usage: python scripts/against_oracle.py RUNS [RUNS ...] [--family F] [--method M] [--rounds K]
  (runs folders, archives or results folders holding one; F default bert, M default fedlns_default; with K, also
  every K-th round of each cell)
"""

from __future__ import annotations

import argparse
import json

from fedlns_sim.runfiles import parse_records
from fedlns_sim.runstore import stored_runs


def gather(sources: list[str], family: str, method: str) -> dict:
    """(partition, fraction, attack, seed) -> the run's and its oracle's records, with the run's active rounds and those
    of them that kept the oracle's clients (:func:`kept_like_oracle`); finished runs with attackers."""
    runs, oracles = {}, {}
    for source in sources:
        for _name, files in stored_runs(source):
            config = json.loads(files["config.json"])["config"]
            records = parse_records(files["rounds.jsonl"])
            finished = records[-1]["round"] >= config["rounds"]
            if config["family"] != family or not config["malicious_fraction"] or not finished:
                continue
            partition, fraction, seed = config["partition"], config["malicious_fraction"], config["seed"]
            if config["method"] == method:
                runs[partition, fraction, config.get("attack"), seed] = records
            elif config["method"] == "oracle":  # one oracle per setting and seed serves every attack
                oracles[partition, fraction, seed] = records
    cells = {}
    for (partition, fraction, attack, seed), run in runs.items():
        oracle = oracles.get((partition, fraction, seed))
        if oracle is not None:
            active, same = kept_like_oracle(run, oracle)
            cells[partition, fraction, attack, seed] = {"run": run, "oracle": oracle, "active": active, "same": same}
    return cells


def largest_fall(records: list[dict], start: int) -> tuple[float, int]:
    """The largest fall of perplexity from one round to the next into a round from ``start`` on, and that round."""
    perplexity = {r["round"]: r["perplexity"] for r in records}
    falls = {t: perplexity[t - 1] - perplexity[t] for t in perplexity if t >= max(start, 1) and t - 1 in perplexity}
    at = max(falls, key=lambda t: falls[t])
    return falls[at], at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--family", default="bert")
    parser.add_argument("--method", default="fedlns_default")
    parser.add_argument("--rounds", type=int, default=0, help="also print every K-th round of each cell")
    args = parser.parse_args(argv)
    cells = sorted(gather(args.runs, args.family, args.method).items())
    print(
        "| partition | malicious | attack | seed | rounds that kept the oracle's clients | best: run / oracle (gap) | "
        "largest one-round fall after activation: run / oracle |"
    )
    print("|---|---:|---|---:|---:|---:|---|")
    for (partition, fraction, attack, seed), cell in cells:
        run, oracle, active, same = cell["run"], cell["oracle"], cell["active"], cell["same"]
        start = active[0] if active else 1
        (run_fall, run_at), (oracle_fall, oracle_at) = (largest_fall(records, start) for records in (run, oracle))
        best, oracle_best = (min(r["perplexity"] for r in records[1:]) for records in (run, oracle))
        print(
            f"| {partition} | {100 * fraction:.0f}% | {attack} | {seed} | {len(same)} of {len(active)} | {best:.1f} / "
            f"{oracle_best:.1f} ({100 * (best / oracle_best - 1):+.1f}%) | {run_fall:.1f} into round {run_at} / "
            f"{oracle_fall:.1f} into round {oracle_at} |"
        )
    for (partition, fraction, attack, seed), cell in cells if args.rounds else ():
        by_round = {r["round"]: r for r in cell["oracle"]}
        same = set(cell["same"])
        print(f"\n{args.family} {partition} {100 * fraction:.0f}% {attack} seed {seed}\n")
        print("| round | run | oracle | kept the oracle's clients |")
        print("|---:|---:|---:|---|")
        for record in cell["run"][:: args.rounds]:
            t = record["round"]
            marked = "yes" if t in same else "-"
            print(f"| {t} | {record['perplexity']:.1f} | {by_round[t]['perplexity']:.1f} | {marked} |")
    return 0


def kept_like_oracle(run: list[dict], oracle: list[dict]) -> tuple[list[int], list[int]]:
    """The run's screened rounds from activation, and those of them that kept exactly the oracle's clients."""
    kept = {r["round"]: set(map(str, r.get("kept", []))) for r in oracle}
    active = [r for r in run if r["round"] >= 1 and r.get("active") and r.get("decided")]
    return [r["round"] for r in active], [r["round"] for r in active if set(map(str, r["kept"])) == kept[r["round"]]]


if __name__ == "__main__":
    raise SystemExit(main())
