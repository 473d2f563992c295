#!/usr/bin/env bash
# The runs behind docs/results/adaptive: FedLNS(cohort_weight="agreeing", cohort_undecided="adaptive") against
# FedLNS() as it ships (PLAN.md, fixed before the runs), at seed 1000 (and 800 in the cpu preset), with
# majority_drift, the attack written against it. LoRA cells: adapters only, the LoRA matrix's learning rates; the
# cpu preset: models trained from scratch. Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_adaptive.sh [RUNS_DIR]   (default runs/adaptive)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), PART (default all; or lora, A-D's
# LoRA cells, or cpu, the rest: two sweeps of about equal length that can run side by side; or matrix, the follow-up
# with FedLNS() as it ships now, FAMILIES "gpt llama" by default, one family a sweep to split it; or seed100 and
# bert20, follow-up 2, and seed300 and bert40, follow-up 3: FAMILIES as for matrix, PARTITIONS "iid noniid" by
# default).
set -euo pipefail
runs="${1:-runs/adaptive}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
candidate=(--set cohort_weight=agreeing --set cohort_undecided=adaptive)
ATTACKS=target_corruption,backdoor,ipm,alie,lora_quiet,lora_band  # the LoRA matrix's six
cpu_cell() {  # cpu_cell FAMILY PARTITION FRACTION SEED ATTACK [METHODS]: the default and the candidate (and METHODS)
  local args=(--preset cpu --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs" --families "$1"
    "${round_vote[@]}" --partitions "$2" --fractions "$3" --seeds "$4" --no-references)
  [ "$3" = 0 ] || args+=(--attacks "$5")
  "$sim" sweep "${args[@]}" --methods "fedlns_default${6:+,$6}" "${previous[@]}"
  "$sim" sweep "${args[@]}" --methods fedlns_default "${previous[@]}" "${candidate[@]}"
}

lora() {
  for family in gpt llama; do
    for attack in weak_core majority_only majority_weak; do cell "$family" iid 0.4 1000 "$attack" fedavg; done  # A-C
    cell "$family" iid 0.4 1000 target_corruption   # E
  done
  cell gpt iid 0.4 1000 majority_drift fedavg   # D
}
cpu() {
  for seed in 800 1000; do cpu_cell gpt iid 0.4 "$seed" majority_drift fedavg; done   # D
  for attack in target_corruption majority_only alie; do cpu_cell gpt iid 0.4 800 "$attack"; done   # F
  cpu_cell gpt noniid 0 800 none
  for family in bert llama; do
    for attack in target_corruption majority_only; do cpu_cell "$family" iid 0.4 800 "$attack"; done
  done
  for attack in majority_only alie; do cpu_cell gpt iid 0.4 1000 "$attack"; done
  cell bert iid 0.4 1000 target_corruption   # E
  lora_sweep gpt iid 0.4 800 weak_core --methods fedlns_default "${candidate[@]}"   # G
  lora_sweep llama iid 0.4 800 majority_weak --methods fedlns_default "${candidate[@]}"
}
matrix() {  # the follow-up (PLAN.md): the LoRA matrix's GPT and LLaMA cells at seed 200, FedLNS() as it ships now
  local family fraction
  for family in ${FAMILIES:-gpt llama}; do
    for fraction in 0.4 0.2; do
      lora_sweep "$family" iid,noniid "$fraction" 200 "$ATTACKS" --methods fedlns_default
    done
    lora_sweep "$family" iid,noniid 0 200 none --methods fedlns_default
  done
}
seeded() {  # seeded SEED: follow-ups 2 (seed 100) and 3 (seed 300), PLAN.md: GPT and LLaMA, FedAvg and FedLNS() as
  # it ships now, on this machine
  local family fraction
  for family in ${FAMILIES:-gpt llama}; do
    for fraction in 0.4 0.2; do
      lora_sweep "$family" iid,noniid "$fraction" "$1" "$ATTACKS" --methods fedavg,fedlns_default
    done
    lora_sweep "$family" iid,noniid 0 "$1" none --methods fedavg,fedlns_default
    lora_sweep "$family" iid,noniid 0.4 "$1" target_corruption --methods oracle
  done
}
bert() {  # bert FRACTION: follow-ups 2 (20%) and 3 (40%): BERT at seed 100, FedLNS() as it ships now
  local partition
  for partition in ${PARTITIONS:-iid noniid}; do lora_sweep bert "$partition" "$1" 100 "$ATTACKS" --methods fedlns_default; done
}
case "$part" in
  lora) lora ;;
  cpu) cpu ;;
  matrix) matrix ;;
  seed100) seeded 100 ;;
  seed300) seeded 300 ;;
  bert20) bert 0.2 ;;
  bert40) bert 0.4 ;;
  *) lora && cpu ;;
esac
