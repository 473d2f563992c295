#!/usr/bin/env bash
# The runs behind docs/results/open-keep: FedLNS(cohort_open="keep") against FedLNS() as it ships (an open round that
# is not contested left to the support rule) in the LoRA scenario, seed 100 (PLAN.md, fixed before the runs). FedLNS()'s
# and FedAvg's runs of the cells docs/results/strong-minority and docs/results/contested-reject made on the same
# machine are read from there; this makes the rest. Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_open_keep.sh [RUNS_DIR]   (default runs/open-keep)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), FAMILIES (default "gpt llama", one family
# a sweep to split it).
set -euo pipefail
runs="${1:-runs/open-keep}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
candidate=("${shipped[@]}" --set cohort_open=keep)
for family in ${FAMILIES:-gpt llama}; do
  for partition in iid noniid; do lora_sweep "$family" "$partition" 0.2 100 alie "${candidate[@]}"; done  # K1
  lora_sweep "$family" iid 0.4 100 majority_weak --methods fedavg                                          # K2
  lora_sweep "$family" iid 0.4 100 majority_weak "${candidate[@]}"
  trio "$family" iid 0.4 100 weak_core
  lora_sweep "$family" iid 0.4 100 minority_flip "${candidate[@]}"
  lora_sweep "$family" iid 0.4 100 target_corruption "${candidate[@]}"                                   # K3
  for partition in iid noniid; do lora_sweep "$family" "$partition" 0 100 none "${candidate[@]}"; done
done
