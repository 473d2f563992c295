"""What the cohort rule of this checkout decides on rounds another version of it recorded.

A ``fedlns_default`` run made with ``--set record_signatures=true`` keeps every round's signatures and update
sketches. Replaying the cohort rule on them (``fedlns_sim.replay``, variant ``cohort``, or ``cohort:significant``
with ``--cut significant``) gives this checkout's decisions on the same updates; this prints, per run, the
recorded and the replayed detection rates and attackers-only rounds. The replay is open-loop: the updates are the recorded run's, whose global model followed
the recorded decisions, so it says what the rule does with those rounds, not what a new run would end at.

Usage: python scripts/cut_replay.py [--cut tree|significant] RUN [RUN ...]   (run folders with a signatures/ folder)
"""

from __future__ import annotations

import sys
from pathlib import Path

from fedlns_sim.replay import replay_support


def rates(decisions: list[dict], kept_key: str) -> str:
    """TPR, FPR and the number of screened rounds that kept attackers only, from one set of decisions."""
    rejected_attackers = attackers = rejected_honest = honest = attackers_only = 0
    for decision in decisions:
        kept, malicious = set(decision[kept_key] or ()), set(decision["malicious"])
        for client in decision["clients"]:
            if client in malicious:
                attackers += 1
                rejected_attackers += client not in kept
            else:
                honest += 1
                rejected_honest += client not in kept
        attackers_only += bool(kept) and kept <= malicious
    tpr = f"{rejected_attackers / attackers:.2f}" if attackers else "-"
    return (
        f"TPR {tpr:>4}  FPR {rejected_honest / max(honest, 1):.3f} ({rejected_honest:3d} of {honest} honest "
        f"rejected)  attackers-only rounds {attackers_only}"
    )


def main(argv: list[str]) -> int:
    variant = "cohort"
    if argv[:1] == ["--cut"] and len(argv) > 1:
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
