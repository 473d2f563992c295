#!/usr/bin/env bash
# The runs behind docs/results/contested: FedLNS(cohort_weight="agreeing", cohort_undecided="hold_contested")
# against FedLNS() as it ships (PLAN.md, fixed before the runs), seeds 800 and 900, with majority_weak, the attack
# written against it. LoRA cells: adapters only, the LoRA matrix's learning rates; F: the cpu preset. Resumable:
# finished runs are skipped.
#
# Usage: bash scripts/results_contested.sh [RUNS_DIR]   (default runs/contested)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), PART (default all; or first, A and B at
# seed 800 and E, or second, the rest: two sweeps of about equal length that can run side by side; or hold, the
# second plan's candidate, hold/PLAN.md, with TARGETS lora or cpu and FAMILIES, e.g. "gpt llama", to split it).
set -euo pipefail
runs="${1:-runs/contested}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
candidate=(--set cohort_weight=agreeing --set cohort_undecided=hold_contested)
cpu_cell() {  # cpu_cell PARTITION FRACTION ATTACK: GPT from scratch at seed 800, the default and the candidate
  local args=(--preset cpu --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs" --families gpt
    "${round_vote[@]}" --partitions "$1" --fractions "$2" --seeds 800 --methods fedlns_default --no-references)
  [ "$2" = 0 ] || args+=(--attacks "$3")
  "$sim" sweep "${args[@]}" "${previous[@]}"
  "$sim" sweep "${args[@]}" "${previous[@]}" "${candidate[@]}"
}

first() {
  for family in gpt llama bert; do
    cell "$family" iid 0.4 800 weak_core fedavg       # A
    cell "$family" iid 0.4 800 majority_only fedavg   # B
  done
  cell bert iid 0.2 800 alie   # E
  cell bert noniid 0 800 none
}
second() {
  for family in gpt llama; do
    cell "$family" iid 0.4 900 weak_core fedavg       # A
    cell "$family" iid 0.4 900 majority_only fedavg   # B
    cell "$family" iid 0.4 800 majority_weak fedavg   # C
  done
  for family in gpt llama bert; do cell "$family" iid 0.4 800 target_corruption; done  # D
  for attack in target_corruption majority_only alie; do cpu_cell iid 0.4 "$attack"; done  # F
  cpu_cell noniid 0 none
  lora_sweep bert iid 0.4 400 weak_core --methods fedlns_default "${candidate[@]}"   # G
  lora_sweep gpt iid 0.4 700 majority_only --methods fedlns_default "${candidate[@]}"
}
hold() {  # the second plan (hold/PLAN.md): its candidate in the first plan's cells A-F (FAMILIES: A-E's families)
  candidate=(--set cohort_weight=agreeing --set cohort_undecided=hold)
  if [ "${TARGETS:-all}" != cpu ]; then
    for family in ${FAMILIES:-gpt llama bert}; do
      for seed in 800 900; do
        [ "$family.$seed" = bert.900 ] && continue
        lora_sweep "$family" iid 0.4 "$seed" weak_core --methods fedlns_default "${candidate[@]}"       # A
        lora_sweep "$family" iid 0.4 "$seed" majority_only --methods fedlns_default "${candidate[@]}"   # B
      done
      [ "$family" = bert ] || lora_sweep "$family" iid 0.4 800 majority_weak --methods fedlns_default "${candidate[@]}"
      lora_sweep "$family" iid 0.4 800 target_corruption --methods fedlns_default "${candidate[@]}"   # D
    done
    if [[ " ${FAMILIES:-bert} " == *" bert "* ]]; then
      lora_sweep bert iid 0.2 800 alie --methods fedlns_default "${candidate[@]}"   # E
      lora_sweep bert noniid 0 800 none --methods fedlns_default "${candidate[@]}"
    fi
  fi
  if [ "${TARGETS:-all}" != lora ]; then
    for attack in target_corruption majority_only alie; do   # F: cpu_cell runs the default again (skipped: done)
      cpu_cell iid 0.4 "$attack"
    done
    cpu_cell noniid 0 none
  fi
}
case "$part" in
  first) first ;;
  second) second ;;
  hold) hold ;;
  *) first && second ;;
esac
