"""What the cohort rule of this checkout decides on rounds another version of it recorded.

A ``fedlns_default`` run made with ``--set record_signatures=true`` keeps every round's signatures and update
sketches. Replaying the cohort rule on them (``fedlns_sim.replay``, variant ``cohort``; ``cohort:significant`` with
``--cut significant``, ``cohort:history`` with ``--vote history``) gives this checkout's decisions on the same
updates; this prints, per run, the recorded and the replayed detection rates and attackers-only rounds. The replay is
open-loop: the updates are the recorded run's, whose global model followed the recorded decisions, so it says what the
rule does with those rounds, not what a new run would end at.

Usage: python scripts/cut_replay.py [--cut tree|significant | --vote round|history|strong] RUN [RUN ...]
  (run folders with a signatures/ folder)
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from fedlns_sim.replay import replay_support
from fedlns_sim.report.stats import detection_rates, screening_counts


def rates(decisions: list[dict], kept_key: str) -> str:
    """TPR, FPR and the number of screened rounds that kept attackers only, from one set of decisions."""
    c = screening_counts((d["clients"], d[kept_key] or (), d["malicious"]) for d in decisions)
    rates = detection_rates(c["tp"], c["fp"], c["fn"], c["tn"])
    tpr = "-" if math.isnan(rates["tpr"]) else f"{rates['tpr']:.2f}"
    honest = c["fp"] + c["tn"]
    return (
        f"TPR {tpr:>4}  FPR {rates['fpr']:.3f} ({c['fp']:3d} of {honest} honest "
        f"rejected)  attackers-only rounds {c['attackers_only']}"
    )


def main(argv: list[str]) -> int:
    variant = "cohort"
    if argv[:1] in (["--cut"], ["--vote"]) and len(argv) > 1:
        variant, argv = f"cohort:{argv[1]}", argv[2:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    print(f"{'run':60s} {'decisions':9s}")
    for run in map(Path, argv):
        if not (run / "signatures").is_dir():
            continue  # a cache folder, or a run recorded without signatures
        decisions = replay_support(run, variant)
        print(f"{run.name[:60]:60s} recorded  {rates(decisions, 'recorded_kept')}")
        print(f"{'':60s} replayed  {rates(decisions, 'kept')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
