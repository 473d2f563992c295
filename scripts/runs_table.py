"""One line per run: its cell, the rule's settings that vary, perplexity, detection rates, attackers-only rounds.

For results folders whose runs are single cells rather than a matrix (e.g. ``docs/results/cut-test``): prints a
Markdown table with, per run, family, partition, malicious share, attack, method, seed, the default rule's
``cohort_cut`` and ``cohort_undecided`` (``fedlns_default`` runs only), the best and the last 10 rounds' mean
perplexity, TPR / FPR over the screened rounds and the number of screened rounds that kept attackers only.

Usage: python scripts/runs_table.py RUNS [RUNS ...]   (runs folders, archives or results folders holding one)
"""

from __future__ import annotations

import json
import math
import sys

from fedlns_sim.report.stats import detection_rates, screening_counts
from fedlns_sim.runfiles import parse_records
from fedlns_sim.runstore import stored_runs


def summary(config: dict, records: list[dict]) -> str:
    perplexity = [r["perplexity"] for r in records if "perplexity" in r]
    c = screening_counts(
        (r["sampled"], r["kept"], r.get("malicious_sampled", []))
        for r in records[1:]
        if r.get("active") and "kept" in r
    )
    screens = config["method"].startswith("fedlns")
    rule = (
        f"{config.get('cohort_cut', 'tree')} / {config.get('cohort_undecided', 'keep')}"
        if config["method"] == "fedlns_default"
        else "-"
    )
    detection = detection_rates(c["tp"], c["fp"], c["fn"], c["tn"])
    tpr = "-" if math.isnan(detection["tpr"]) else f"{detection['tpr']:.2f}"  # no attackers: nothing to catch
    rates = f"{tpr} / {detection['fpr']:.2f}" if screens else "-"
    return (
        f"| {config['family']} | {config['partition']} | {100 * config['malicious_fraction']:.0f}% | "
        f"{config['attack'] if config['malicious_fraction'] else '-'} | {config['method']} | {config['seed']} | "
        f"{rule} | {min(perplexity):.1f} / "
        f"{sum(perplexity[-10:]) / 10:.1f} | {rates} | {c['attackers_only'] if screens else '-'} |"
    )


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    print(
        "| family | partition | malicious | attack | method | seed | cohort_cut / undecided | best / last 10 | "
        "TPR / FPR | attackers-only rounds |"
    )
    print("|---|---|---:|---|---|---:|---|---:|---:|---:|")
    for source in argv:
        for _name, files in stored_runs(source):
            print(summary(json.loads(files["config.json"])["config"], parse_records(files["rounds.jsonl"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
