#!/usr/bin/env bash
# The runs behind docs/results/balance: FedLNS(cohort_balance=0.8, cohort_open="keep") against FedLNS() as it ships in
# the LoRA scenario (PLAN.md, fixed before the runs). FedLNS()'s and FedAvg's runs of the cells that
# docs/results/strong-minority (and its shipped/ runs), docs/results/contested-reject and docs/results/open-keep made on
# the same machine are read from there; this makes the rest. Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_balance.sh [RUNS_DIR]   (default runs/balance)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), FAMILIES (default "gpt llama", one family
# a sweep to split it; under PART=followup "gpt llama bert cpu": bert its BERT cells, cpu the cpu preset's), PART
# (default: the plan; followup: its follow-up; majority: after the verdict, the attacks that hold rounds, majority_only,
# majority_weak and majority_drift, GPT and LLaMA IID 40% seed 100, with FedAvg; FedLNS()'s runs read from
# contested-reject, majority_weak's FedAvg from open-keep).
set -euo pipefail
runs="${1:-runs/balance}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
balance=(--set cohort_balance=0.8 --set cohort_open=keep)
candidate=("${shipped[@]}" "${balance[@]}")
if [ "$part" = majority ]; then
  for family in ${FAMILIES:-gpt llama}; do
    for attack in majority_only majority_weak majority_drift; do
      [ "$attack" = majority_weak ] || lora_sweep "$family" iid 0.4 100 "$attack" --methods fedavg  # open-keep's
      lora_sweep "$family" iid 0.4 100 "$attack" "${candidate[@]}"
    done
  done
  exit 0
fi
if [ "$part" = followup ]; then  # PLAN.md's follow-up: BERT (F1), seed 400 (F2), the cpu preset (F3)
  for family in ${FAMILIES:-gpt llama bert cpu}; do
    case "$family" in
      bert)
        lora_sweep bert iid 0.4 100 minority_flip "${candidate[@]}"
        trio bert iid 0.4 100 victim_flip
        pair bert iid 0.4 100 target_corruption
        trio bert iid 0 100 none
        pair bert iid 0.2 100 alie
        ;;
      cpu)
        cpu=(--preset cpu --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs" --families gpt
          --partitions iid --seeds 100 --no-references --methods fedlns_default)
        for attack in target_corruption norm_freeze; do
          "$sim" sweep "${cpu[@]}" --fractions 0.4 --attacks "$attack"
          "$sim" sweep "${cpu[@]}" --fractions 0.4 --attacks "$attack" "${balance[@]}"
        done
        "$sim" sweep "${cpu[@]}" --fractions 0
        "$sim" sweep "${cpu[@]}" --fractions 0 "${balance[@]}"
        ;;
      *)
        for attack in minority_flip victim_flip; do trio "$family" iid 0.4 400 "$attack"; done
        pair "$family" iid 0.4 400 target_corruption
        trio "$family" noniid 0 400 none
        ;;
    esac
  done
  exit 0
fi
for family in ${FAMILIES:-gpt llama}; do
  for seed in 100 200 300; do lora_sweep "$family" iid 0.4 "$seed" minority_flip "${candidate[@]}"; done  # B1
  trio "$family" iid 0.4 100 victim_flip                                                                  # B2
  lora_sweep "$family" iid 0.4 100 target_corruption "${candidate[@]}"                                   # B3
  for partition in iid noniid; do lora_sweep "$family" "$partition" 0 100 none "${candidate[@]}"; done
  for partition in iid noniid; do lora_sweep "$family" "$partition" 0.2 100 alie "${candidate[@]}"; done  # B4
  lora_sweep "$family" iid 0.4 300 agree_blend "${candidate[@]}"                                         # B5
  lora_sweep "$family" iid 0.4 100 contest_flip "${candidate[@]}"
  lora_sweep "$family" iid 0.4 100 weak_core "${candidate[@]}"
done
