#!/usr/bin/env bash
# The runs behind docs/results/margin: FedLNS(cohort_margin=0.5) against FedLNS() as it ships (the settled vote) in
# the LoRA scenario, seed 100 (PLAN.md, fixed before the runs): without attackers, at 20% under ALIE and a backdoor,
# and at 40% under weak_core and target corruption. FedLNS()'s runs of most cells are placed-vote/settled's, FedAvg's
# those of adaptive/seed100 and placed-vote; the two this needs that nobody made (target corruption at 40% with the
# settled vote) are made here. Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_margin.sh [RUNS_DIR]   (default runs/margin)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), FAMILIES (default "gpt llama", one family
# a sweep to split it).
set -euo pipefail
runs="${1:-runs/margin}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
shipped=(--methods fedlns_default --set cohort_vote=settled)  # FedLNS() as it ships (lora_cells.sh pins the round vote)
candidate=("${shipped[@]}" --set cohort_margin=0.5)
for family in ${FAMILIES:-gpt llama}; do
  lora_sweep "$family" iid,noniid 0 100 none "${candidate[@]}"                       # M1
  lora_sweep "$family" iid,noniid 0.2 100 alie,backdoor "${candidate[@]}"           # M2
  lora_sweep "$family" iid 0.4 100 weak_core,target_corruption "${candidate[@]}"    # M3
  lora_sweep "$family" iid 0.4 100 target_corruption "${shipped[@]}"
done
