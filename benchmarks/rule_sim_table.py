"""The retain rules replayed on recorded cpu-preset signatures, as a Markdown table (docs/rules.md).

Run (the runs take about 15 minutes on 2 cores; the replay a minute)::

    fedlns-sim sweep --preset cpu --families gpt,llama --partitions iid --methods fedlns --fractions 0,0.4 \\
        --seeds 100,200,300 --no-references --set record_signatures=true --jobs 2 --out runs/rules-sig
    python -m fedlns_sim.replay runs/rules-sig/*-*/ --variants paper,guarded,guarded:3:1,guarded:3:2 \\
        > docs/rules/sim_replay.jsonl
    python benchmarks/rule_sim_table.py docs/rules/sim_replay.jsonl

Rates are means over the seeds' runs (range over seeds); "wrong" counts the active rounds in which the kept
group held a larger share of attackers than the rejected one.
"""

import json
import sys
from collections import defaultdict


def main(path: str) -> int:
    groups = defaultdict(list)
    variants = []
    for line in open(path):
        row = json.loads(line)
        family, _, rest = row["run"].partition("-")
        fraction = rest.split("-")[1].removeprefix("mal")
        groups[(family, fraction, row["variant"])].append(row)
        if row["variant"] not in variants:
            variants.append(row["variant"])
    print("| family | malicious | rule | runs | TPR | FPR | wrong rounds |")
    print("|---|---|---|---|---|---|---|")
    for family, fraction in sorted({(f, m) for f, m, _ in groups}):
        for variant in variants:
            rows = groups[(family, fraction, variant)]
            tpr = [r["tpr"] for r in rows]
            fpr = [r["fpr"] for r in rows]
            wrong = sum(r["wrong_cluster_rounds"] for r in rows)
            rounds = sum(r["rounds"] for r in rows)
            tpr_text = "--" if fraction == "00" else f"{sum(tpr) / len(tpr):.2f} ({min(tpr):.2f}-{max(tpr):.2f})"
            print(f"| {family} | {int(fraction)}% | {variant} | {len(rows)} | {tpr_text} | "
                  f"{sum(fpr) / len(fpr):.3f} ({min(fpr):.3f}-{max(fpr):.3f}) | {wrong} of {rounds} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
