"""Where ``FedLNS()`` rejects honest clients: its honest rejections by how many attackers the round held.

Reads ``FedLNS()`` runs (runs folders, or results folders holding their archive) and counts, over the rounds it
decided after activation, the honest updates and how many of them it rejected, grouped by family, fraction and the
number of attackers sampled in the round; a rejection is "cut" when the cohort rule's cut rejected it (the reason
names the part of the round apart) and "loud" otherwise (a loud normalization change).

Usage: python scripts/honest_rejections.py RUNS [RUNS ...] [--seeds S]   (S: comma-separated, default: every seed)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict

from fedlns_sim.runfiles import parse_records
from fedlns_sim.runstore import stored_runs

OURS = "fedlns_default"
MOST = 4  # rounds with this many attackers or more share a column


def count(sources: list[str], seeds: tuple[int, ...] | None) -> dict:
    """(family, fraction) -> Counter of ("honest" | "cut" | "loud", attackers in the round, at most MOST)."""
    table: dict = defaultdict(Counter)
    for _, files in (run for source in sources for run in stored_runs(source)):
        config = json.loads(files["config.json"])["config"]
        records = parse_records(files["rounds.jsonl"])
        if config["method"] != OURS or (seeds is not None and config["seed"] not in seeds):
            continue
        if records[-1]["round"] < config["rounds"]:
            continue  # a run still in progress
        counts = table[(config["family"], config["malicious_fraction"])]
        for record in records[1:]:
            if not record.get("decided") or not record.get("active", True):
                continue
            attackers = {str(c) for c in record["malicious_sampled"]}
            kept = {str(c) for c in record["kept"]}
            honest = [str(c) for c in record["sampled"] if str(c) not in attackers]
            column = min(len(attackers), MOST)
            counts["honest", column] += len(honest)
            for client in honest:
                if client not in kept:
                    cut = "part of the round apart" in record["rejected_reasons"][client]
                    counts["cut" if cut else "loud", column] += 1
    return table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--seeds", default=None)
    args = parser.parse_args(argv)
    seeds = None if args.seeds is None else tuple(int(s) for s in args.seeds.split(","))
    table = count(args.runs, seeds)
    columns = range(MOST + 1)
    heads = [f"{k}{'+' if k == MOST else ''} attacker{'' if k == 1 else 's'}" for k in columns]
    print("Honest updates rejected / honest updates (the share), by the number of attackers in the round (rounds")
    print("decided after activation, every attack and partition together); the last column: how many of the")
    print("rejections the loud test made (the rest, the cut).\n")
    print("| family | malicious | " + " | ".join(heads) + " | all | by the loud test |")
    print("|---|---:|" + "---:|" * (len(heads) + 2))
    for (family, fraction), counts in sorted(table.items()):
        cells = []
        for column in (*columns, None):
            honest, rejected = (
                sum(v for (k, c), v in counts.items() if k in kinds and column in (None, c))
                for kinds in (("honest",), ("cut", "loud"))
            )
            cells.append(f"{rejected} / {honest} ({rejected / honest:.1%})" if honest else "-")
        loud = sum(v for (k, _), v in counts.items() if k == "loud")
        print(f"| {family} | {fraction:.0%} | " + " | ".join(cells) + f" | {loud} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
