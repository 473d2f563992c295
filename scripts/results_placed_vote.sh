#!/usr/bin/env bash
# The runs behind docs/results/placed-vote: FedLNS(cohort_vote="placed") against FedLNS() as it ships, in the LoRA
# scenario (PLAN.md, fixed before the runs): the attacks written against a vote that reads the history first, then
# the LoRA matrix's GPT and LLaMA cells at seeds 100 and 300, whose FedLNS(), FedAvg and oracle runs are those of
# docs/results/adaptive (seed100, seed300). Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_placed_vote.sh [RUNS_DIR]   (default runs/placed-vote)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), PART (default all; or against, A; or
# matrix, B and C; or followup, D, E and F of its follow-up; or settled, S1-S3 of its follow-up 2; or settled_followup,
# its follow-up 3; or settled_cpu, its follow-up 4; or settled_against, its follow-up 5; or settled_seed300, its
# follow-up 6), FAMILIES (one family a sweep to split a part), PARTITIONS (default "iid noniid": F's, to split it).
set -euo pipefail
runs="${1:-runs/placed-vote}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
candidate=(--methods fedlns_default --set cohort_vote=placed)
matrix_attacks=target_corruption,backdoor,ipm,alie,lora_quiet,lora_band

against() {  # A: white-box against the weak cut's vote and against reading the history, with FedAvg and FedLNS()
  local family
  for family in ${FAMILIES:-gpt llama}; do
    lora_sweep "$family" iid 0.4 100 majority_weak,weak_core,agree_blend,sleeper --methods fedavg,fedlns_default
    lora_sweep "$family" iid 0.4 100 majority_weak,weak_core,agree_blend,sleeper "${candidate[@]}"
    lora_sweep "$family" iid 0.2 100 sleeper --methods fedavg,fedlns_default
    lora_sweep "$family" iid 0.2 100 sleeper "${candidate[@]}"
  done
}
matrix() {  # B and C: the candidate in the matrix's cells, 20% and without attackers first, then 40%
  local family seed
  for seed in 100 300; do
    for family in ${FAMILIES:-gpt llama}; do
      lora_sweep "$family" iid,noniid 0.2 "$seed" "$matrix_attacks" "${candidate[@]}"
      lora_sweep "$family" iid,noniid 0 "$seed" none "${candidate[@]}"
      lora_sweep "$family" iid,noniid 0.4 "$seed" "$matrix_attacks" "${candidate[@]}"
    done
  done
}
settled_vote=(--methods fedlns_default --set cohort_vote=settled)  # follow-ups 2-4's candidate, 5's FedLNS()
seeds_against() {  # D and E (PLAN.md's follow-up) with the given sweep options: edgeless, and weak_core's seeds
  local family fraction seed
  for family in ${FAMILIES:-gpt llama}; do
    for fraction in 0.4 0.2; do lora_sweep "$family" iid "$fraction" 100 edgeless "$@"; done
    for seed in 200 300; do lora_sweep "$family" iid 0.4 "$seed" weak_core,agree_blend "$@"; done
  done
}
bert_cells() {  # F (PLAN.md's follow-up) with the given sweep options: BERT 40%, the matrix's six attacks
  local partition
  for partition in ${PARTITIONS:-iid noniid}; do lora_sweep bert "$partition" 0.4 100 "$matrix_attacks" "$@"; done
}
followup() {  # D, E and F (PLAN.md's follow-up): the attack written against the candidate, its loss's seeds, BERT
  seeds_against --methods fedavg,fedlns_default
  seeds_against "${candidate[@]}"
  bert_cells "${candidate[@]}"
}
settled_cells() {  # settled_cells SEED [ATTACK]: S1 and S3's cells at SEED with the settled vote (and ATTACK, S2's,
  # at 40% IID between them)
  local family
  for family in ${FAMILIES:-gpt llama}; do
    lora_sweep "$family" iid,noniid 0.2 "$1" "$matrix_attacks" "${settled_vote[@]}"
    [ -z "${2:-}" ] || lora_sweep "$family" iid 0.4 "$1" "$2" "${settled_vote[@]}"
    lora_sweep "$family" iid,noniid 0 "$1" none "${settled_vote[@]}"
  done
}
settled() { settled_cells 100 weak_core; }  # S1-S3 (PLAN.md's follow-up 2): where "placed" made its gains and its loss
settled_followup() {  # follow-up 3 (PLAN.md): cohort_vote="settled" in D, E and F
  seeds_against "${settled_vote[@]}"
  bert_cells "${settled_vote[@]}"
}
settled_seed300() { settled_cells 300; }  # follow-up 6 (PLAN.md): FedLNS(), now the settled vote, at seed 300
settled_cpu() {  # follow-up 4 (PLAN.md): cohort_vote="settled" in adaptive's cpu-preset cells
  local family attack seed
  cpu_sweep() {  # FAMILY PARTITION FRACTION SEED ATTACK: the settled vote in one cpu-preset cell, as adaptive ran it
    local args=(--preset cpu --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs" --families "$1"
      --partitions "$2" --fractions "$3" --seeds "$4" --no-references "${settled_vote[@]}")
    [ "$3" = 0 ] || args+=(--attacks "$5")
    "$sim" sweep "${args[@]}"
  }
  for family in ${FAMILIES:-gpt bert llama}; do
    if [ "$family" = gpt ]; then
      for seed in 800 1000; do cpu_sweep gpt iid 0.4 "$seed" majority_drift; done
      for attack in target_corruption majority_only alie; do cpu_sweep gpt iid 0.4 800 "$attack"; done
      cpu_sweep gpt noniid 0 800 none
      for attack in majority_only alie; do cpu_sweep gpt iid 0.4 1000 "$attack"; done
    else
      for attack in target_corruption majority_only; do cpu_sweep "$family" iid 0.4 800 "$attack"; done
    fi
  done
}
settled_against() {  # follow-up 5 (PLAN.md): FedLNS() with the settled vote against weak_sleeper (W), agree_blend's
  # seeds (X) and A's other attacks (Y); the round vote is common's pin (lora_cells.sh's round_vote)
  local family fraction seed
  for family in ${FAMILIES:-gpt llama}; do
    for fraction in 0.4 0.2; do
      lora_sweep "$family" iid "$fraction" 100 weak_sleeper --methods fedavg,fedlns_default
      lora_sweep "$family" iid "$fraction" 100 weak_sleeper "${settled_vote[@]}"
    done
    for seed in 400 500; do
      lora_sweep "$family" iid 0.4 "$seed" agree_blend --methods fedavg,fedlns_default
      lora_sweep "$family" iid 0.4 "$seed" agree_blend "${settled_vote[@]}"
    done
    lora_sweep "$family" iid 0.4 100 majority_weak,agree_blend,sleeper "${settled_vote[@]}"
    lora_sweep "$family" iid 0.2 100 sleeper "${settled_vote[@]}"
  done
}
case "$part" in
  against) against ;;
  matrix) matrix ;;
  followup) followup ;;
  settled) settled ;;
  settled_followup) settled_followup ;;
  settled_cpu) settled_cpu ;;
  settled_against) settled_against ;;
  settled_seed300) settled_seed300 ;;
  *) against && matrix ;;
esac
