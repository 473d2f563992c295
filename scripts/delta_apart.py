"""Per screened round of each screening run: did the deviation score alone separate the attackers, and was anyone cut?

For reading a rule's misses against the paper's statistic: a round's attackers are *apart* on the deviation score
``delta`` when every attacker's score is above every honest client's (``loud``) or below it (``quiet``, as
``norm_freeze`` sends). Prints, per run, one Markdown row per screened round: attackers sampled, clients rejected
(attackers / honest), the attackers' and honest clients' score ranges, and whether they are apart.

Usage: python scripts/delta_apart.py RUNS [RUNS ...]   (runs folders, archives or results folders holding one)
"""

from __future__ import annotations

import json
import sys

from fedlns_sim.runfiles import parse_records
from fedlns_sim.runstore import stored_runs


def rows(records: list[dict]) -> list[str]:
    out = []
    for record in records:
        if not record.get("active") or not record.get("delta"):
            continue
        malicious = {str(c) for c in record.get("malicious_sampled", [])}
        rejected = set(map(str, record["sampled"])) - set(map(str, record["kept"]))
        attackers = [v for k, v in record["delta"].items() if k in malicious]
        honest = [v for k, v in record["delta"].items() if k not in malicious]
        if not attackers or not honest:
            continue
        apart = "loud" if min(attackers) > max(honest) else "quiet" if max(attackers) < min(honest) else "no"
        out.append(
            f"| {record['round']} | {len(attackers)} | {len(rejected & malicious)} / {len(rejected - malicious)} | "
            f"{min(attackers):.2f}-{max(attackers):.2f} | {min(honest):.2f}-{max(honest):.2f} | {apart} |"
        )
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for source in argv:
        for name, files in stored_runs(source):
            config = json.loads(files["config.json"])["config"]
            if not config["method"].startswith("fedlns"):
                continue
            print(f"\n{name}\n")
            print("| round | attackers | rejected (attackers / honest) | attackers' delta | honest delta | apart |")
            print("|---:|---:|---:|---:|---:|---|")
            print("\n".join(rows(parse_records(files["rounds.jsonl"]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
