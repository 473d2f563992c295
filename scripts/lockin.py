"""Per round of a run: whom the screen kept, and the deviation scores of its honest clients and attackers.

For the lock-in of the LoRA scenario (a FedLNS run that keeps only attackers for rounds after activation): prints,
for every decided round, the clients kept (honest / attackers), the median deviation score delta (eq.
``client_score``) of the round's honest clients and of its attackers, their ratio, the mixture's components and
the perplexity, then how many rounds after activation kept attackers only.

Usage: python scripts/lockin.py RUNS [RUNS ...]   (a runs folder, an archive or a results folder holding one, e.g.
docs/results/lora-matrix/lockin)
"""

from __future__ import annotations

import json
import sys
from statistics import median

from fedlns_sim.report.stats import kept_attackers_only
from fedlns_sim.runfiles import parse_records
from fedlns_sim.runstore import stored_runs


def scores(record: dict) -> dict:
    delta = record.get("delta") or {}
    return json.loads(delta.replace("'", '"')) if isinstance(delta, str) else delta


def main(argv: list[str]) -> int:
    for name, files in (run for source in argv for run in stored_runs(source)):
        config = json.loads(files["config.json"])["config"]
        print(f"\n{name} ({config['method']}, signature {config.get('signature', 'norms')}, peft_norms "
              f"{config.get('peft_norms', True)})\n")
        print("| round | kept honest / attackers | median delta honest | median delta attackers | attackers / honest "
              "| components | perplexity |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        locked = []
        for record in parse_records(files["rounds.jsonl"])[1:]:
            if not record.get("decided") or not record.get("active", True):
                continue
            malicious = {str(c) for c in record.get("malicious_sampled", [])}
            kept = {str(c) for c in record.get("kept", [])}
            delta = scores(record)
            honest = [v for c, v in delta.items() if c not in malicious]
            attackers = [v for c, v in delta.items() if c in malicious]
            h, a = (median(values) if values else float("nan") for values in (honest, attackers))
            if kept_attackers_only(kept, malicious):
                locked.append(record["round"])
            print(f"| {record['round']} | {len(kept - malicious)} / {len(kept & malicious)} | {h:.3g} | {a:.3g} | "
                  f"{a / h if h else float('nan'):.2f} | {record.get('n_components', '-')} | "
                  f"{record['perplexity']:.1f} |")
        print(f"\nrounds that kept attackers only: {len(locked)} {locked}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
