#!/usr/bin/env bash
# The runs behind docs/results/contested-reject: FedLNS(cohort_contested="reject") against FedLNS() as it ships (a
# contested round held) in the LoRA scenario (PLAN.md, fixed before the runs): agree_blend at 40% (seeds 300 and
# 400), contest_flip (written against the candidate) at 40% and 20%, the attacks a held round is there to stop
# (majority_only, majority_weak, majority_drift) and no attackers, with FedAvg beside them; every run is made here,
# none read from another folder (those were made on another processor). Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_contested_reject.sh [RUNS_DIR]   (default runs/contested-reject)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), FAMILIES (default "gpt llama", one family
# a sweep to split it), PART (default: the plan; followup: its follow-up, BERT and the cpu preset).
set -euo pipefail
runs="${1:-runs/contested-reject}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
candidate=("${shipped[@]}" --set cohort_contested=reject)

if [ "$part" = followup ]; then  # PLAN.md's follow-up: BERT (F1) and the cpu preset (F2)
  trio bert iid 0.4 300 agree_blend
  trio bert iid 0.4 100 contest_flip
  cpu_sweep() {  # ATTACK [SWEEP OPTIONS...]: GPT IID 40% seed 100 in the cpu preset
    "$sim" sweep --preset cpu --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs" --families gpt \
      --partitions iid --fractions 0.4 --seeds 100 --no-references --attacks "$@"
  }
  for attack in contest_flip majority_only; do
    cpu_sweep "$attack" --methods fedavg
    cpu_sweep "$attack" --methods fedlns_default
    cpu_sweep "$attack" --methods fedlns_default --set cohort_contested=reject
  done
  exit 0
fi
for family in ${FAMILIES:-gpt llama}; do
  for seed in 300 400; do trio "$family" iid 0.4 "$seed" agree_blend; done           # C1
  for fraction in 0.4 0.2; do trio "$family" iid "$fraction" 100 contest_flip; done  # C2
  for attack in majority_only majority_weak majority_drift; do pair "$family" iid 0.4 100 "$attack"; done  # C3
  trio "$family" iid 0 100 none                                                       # C4
done
