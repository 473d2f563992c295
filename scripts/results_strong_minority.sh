#!/usr/bin/env bash
# The runs behind docs/results/strong-minority: FedLNS(cohort_strong_minority="reject") against FedLNS() as it ships
# (such a round left to the support rule) in the LoRA scenario, seed 100 (PLAN.md, fixed before the runs): ALIE at
# 20% (the cells with a round of attackers only), minority_flip (written against the candidate) at 40% and 20%, target
# corruption at 40% and a backdoor at 20%, and no attackers, with FedAvg beside them; every run is made here.
# Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_strong_minority.sh [RUNS_DIR]   (default runs/strong-minority)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), FAMILIES (default "gpt llama", one family
# a sweep to split it; under PART=followup the default is "gpt llama bert", bert its BERT cells), PART (default: the
# plan; followup: its follow-up; shipped: minority_flip against FedLNS() at seeds 200 and 300, and BERT at 100).
set -euo pipefail
runs="${1:-runs/strong-minority}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
candidate=("${shipped[@]}" --set cohort_strong_minority=reject)

if [ "$part" = shipped ]; then  # minority_flip against FedLNS() as it ships at two more seeds, and on BERT (README)
  for family in ${FAMILIES:-gpt llama bert}; do
    seeds="200 300"
    [ "$family" = bert ] && seeds=100
    for seed in $seeds; do
      lora_sweep "$family" iid 0.4 "$seed" minority_flip --methods fedavg
      lora_sweep "$family" iid 0.4 "$seed" minority_flip "${shipped[@]}"
    done
  done
  exit 0
fi
if [ "$part" = followup ]; then  # PLAN.md's follow-up: seed 300 (E1) and BERT (E2)
  for family in ${FAMILIES:-gpt llama bert}; do
    if [ "$family" = bert ]; then
      trio bert iid 0.2 100 alie
      trio bert iid 0.4 100 minority_flip
      trio bert iid 0.4 100 target_corruption
      trio bert iid 0 100 none
      continue
    fi
    for partition in iid noniid; do trio "$family" "$partition" 0.2 300 alie; done
    for fraction in 0.4 0.2; do trio "$family" iid "$fraction" 300 minority_flip; done
    for partition in iid noniid; do trio "$family" "$partition" 0 300 none; done
  done
  exit 0
fi
for family in ${FAMILIES:-gpt llama}; do
  for partition in iid noniid; do trio "$family" "$partition" 0.2 100 alie; done       # D1
  for fraction in 0.4 0.2; do trio "$family" iid "$fraction" 100 minority_flip; done  # D2
  trio "$family" iid 0.4 100 target_corruption                                        # D3
  trio "$family" noniid 0.2 100 backdoor
  for partition in iid noniid; do trio "$family" "$partition" 0 100 none; done        # D4
done
