#!/usr/bin/env bash
# The runs behind docs/results/margin: FedLNS(cohort_margin=0.5) against FedLNS() as it ships (the settled vote) in
# the LoRA scenario, seed 100 (PLAN.md, fixed before the runs): without attackers, at 20% under ALIE and a backdoor,
# and at 40% under weak_core and target corruption. FedLNS()'s runs of most cells are placed-vote/settled's, FedAvg's
# those of adaptive/seed100 and placed-vote; the two this needs that nobody made (target corruption at 40% with the
# settled vote) are made here. Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_margin.sh [RUNS_DIR]   (default runs/margin)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), FAMILIES (default "gpt llama", one family
# a sweep to split it), PART (default: the first plan; followup: its follow-up).
set -euo pipefail
runs="${1:-runs/margin}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
margin=(--set cohort_margin=0.5)  # the candidate's setting; FedAvg's too under margin_blend, which reads it
candidate=("${shipped[@]}" "${margin[@]}")
if [ "$part" = followup ]; then  # PLAN.md's follow-up: margin_blend (N1), seed 300 without attackers (N2)
  for family in ${FAMILIES:-gpt llama}; do
    for fraction in 0.4 0.2; do
      lora_sweep "$family" iid "$fraction" 100 margin_blend --methods fedavg "${margin[@]}"
      lora_sweep "$family" iid "$fraction" 100 margin_blend "${candidate[@]}"
      lora_sweep "$family" iid "$fraction" 100 margin_blend "${shipped[@]}"
    done
    lora_sweep "$family" iid,noniid 0 300 none "${candidate[@]}"
    lora_sweep "$family" iid,noniid 0 300 none "${shipped[@]}"
  done
  exit 0
fi
for family in ${FAMILIES:-gpt llama}; do
  lora_sweep "$family" iid,noniid 0 100 none "${candidate[@]}"                       # M1
  lora_sweep "$family" iid,noniid 0.2 100 alie,backdoor "${candidate[@]}"           # M2
  lora_sweep "$family" iid 0.4 100 weak_core,target_corruption "${candidate[@]}"    # M3
  lora_sweep "$family" iid 0.4 100 target_corruption "${shipped[@]}"
done
