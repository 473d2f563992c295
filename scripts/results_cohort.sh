#!/usr/bin/env bash
# The runs behind docs/results/cohort: FedLNS()'s cohort rule (fedlns_default) on every cell of the robustness matrix
# (docs/results/robust, made with the support rule, the default before it): GPT IID at 0/20/40% under the twelve
# original attacks, the three written against the support rule and majority_only, written against the cohort rule;
# non-IID GPT and IID LLaMA under target_corruption, norm_freeze, ipm, the three against the support rule and
# majority_only. Under majority_only (new) also FedAvg, FLAME and the support rule. The other methods' runs of the
# other cells are those archived in docs/results/attacks and docs/results/robust (their code did not change). The
# clean and oracle references come with each sweep. Settings were fixed before the first run; one seed at a time,
# so that a partial run still gives whole seeds. Every step skips finished runs: run it again to resume.
#
# Usage: bash scripts/results_cohort.sh [RUNS_DIR] [SEEDS]   (default: runs/cohort, "100 200 300")
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/cohort}"
seeds="${2:-100 200 300}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
# FedLNS() as it shipped when these runs were made (the tree's cut, the unit weight, the support fallback, the round
# vote), pinned so that the script re-runs and resumes them as made after the defaults changed.
common=(--preset cpu --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs"
  --set cohort_cut=tree --set cohort_weight=unit --set cohort_undecided=support --set cohort_vote=round)
old=target_corruption,backdoor,sign_flip,scaling,gaussian,alie,ipm,minmax,norm_mimicry,norm_freeze,decoy,delta_budget
new=norm_noise,band_mimic,ipm_search,majority_only
for seed in $seeds; do
  "$sim" sweep "${common[@]}" --families gpt --partitions iid --fractions 0.4,0.2 --methods fedlns_default \
      --attacks "$old,$new" --seeds "$seed"
  "$sim" sweep "${common[@]}" --families gpt --partitions iid --fractions 0 --methods fedlns_default --seeds "$seed"
  for setting in "gpt noniid" "llama iid"; do
    set -- $setting
    "$sim" sweep "${common[@]}" --families "$1" --partitions "$2" --fractions 0.4,0.2 --methods fedlns_default \
        --attacks "target_corruption,norm_freeze,ipm,$new" --seeds "$seed"
    "$sim" sweep "${common[@]}" --families "$1" --partitions "$2" --fractions 0 --methods fedlns_default \
        --seeds "$seed"
  done
  for setting in "gpt iid" "gpt noniid" "llama iid"; do   # the attack against the cohort rule, met by the others
    set -- $setting
    "$sim" sweep "${common[@]}" --families "$1" --partitions "$2" --fractions 0.4,0.2 \
        --methods fedavg,flame,fedlns_support --attacks majority_only --seeds "$seed" --no-references
  done
done
