#!/usr/bin/env bash
# The runs behind docs/results/cohort-weight/seeds: FedLNS(cohort_weight="coherence") against FedLNS() as it ships
# (cohort_cut="confirmed", cohort_weight="unit") at two new seeds, 400 and 500 (PLAN.md, fixed before the runs).
# Adapters only, the LoRA matrix's learning rates. Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_cohort_weight_seeds.sh [RUNS_DIR]   (default runs/cohort-weight-seeds)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), PART (default all: attacks, regression),
# SEEDS (default "400 500").
set -euo pipefail
runs="${1:-runs/cohort-weight-seeds}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
candidate=(--set cohort_weight=coherence)

for seed in ${SEEDS:-400 500}; do seed_cells "$seed"; done
