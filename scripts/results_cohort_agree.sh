#!/usr/bin/env bash
# The runs behind docs/results/cohort-agree: FedLNS(cohort_weight="agreeing") against FedLNS() as it ships
# (cohort_weight="unit") at seeds 400 and 500 (PLAN.md, fixed before the runs), in the cells of cohort-weight/seeds,
# plus agree_blend, the attack written against the candidate. Adapters only, the LoRA matrix's learning rates.
# Resumable: finished runs are skipped, so the default's and FedAvg's runs of cohort-weight/seeds, extracted into
# RUNS_DIR first, are not made again.
#
# Usage: bash scripts/results_cohort_agree.sh [RUNS_DIR]   (default runs/cohort-agree)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), PART (default all: attacks, regression;
# or seeds, the cells of the second plan, seeds/PLAN.md, with SEEDS="600 700"), SEEDS (default "400 500").
set -euo pipefail
runs="${1:-runs/cohort-agree}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
candidate=(--set cohort_weight=agreeing)

for seed in ${SEEDS:-400 500}; do
  if [ "$part" = seeds ]; then
    # The second plan: A. weak_core 40% IID with FedAvg; B. majority_only GPT 40% IID with FedAvg; C. ALIE at 20%,
    # BERT IID; D. no attackers, BERT non-IID.
    for family in gpt llama bert; do cell "$family" iid 0.4 "$seed" weak_core fedavg; done
    cell gpt iid 0.4 "$seed" majority_only fedavg
    cell bert iid 0.2 "$seed" alie
    cell bert noniid 0 "$seed" none
    continue
  fi
  seed_cells "$seed" agree_blend  # the first plan: cohort-weight/seeds' cells, and agree_blend beside weak_core
done
