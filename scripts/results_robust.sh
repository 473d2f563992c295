#!/usr/bin/env bash
# The runs behind docs/results/robust: FedLNS's default (fedlns_default) against every attack of the attack matrix
# (docs/results/attacks) and the three written against it (norm_noise, band_mimic, ipm_search), which every method
# of that matrix also meets; GPT IID at 0/20/40% over seeds 100-300, then non-IID GPT and IID LLaMA for the
# attacks that broke the paper's rule and the new ones (FedAvg, FLAME and the default; the paper's rule under the
# old three). The clean and oracle references come with each sweep.
# Every step skips finished runs: run it again to resume.
#
# Usage: bash scripts/results_robust.sh [RUNS_DIR] [SEEDS]   (default: runs/robust, "100 200 300")
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/robust}"
seeds="${2:-100 200 300}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
# FedLNS() as it shipped when these runs were made (the support rule, before the cohort rule; the round vote), pinned so that the
# script re-runs and resumes them as made after the defaults changed.
common=(--preset cpu --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs"
  --set default_rule=support --set cohort_undecided=keep --set cohort_cut=tree --set cohort_weight=unit
  --set cohort_vote=round)
old=target_corruption,backdoor,sign_flip,scaling,gaussian,alie,ipm,minmax,norm_mimicry,norm_freeze,decoy,delta_budget
new=norm_noise,band_mimic,ipm_search
methods=fedavg,norm_bounded_fedavg,coordinate_median,trimmed_mean,multi_krum,flame,fedlns,fedlns_multi_krum,fedlns_median,fedlns_norm_bound
for seed in $seeds; do   # one seed at a time, so that a partial run still gives whole seeds
  "$sim" sweep "${common[@]}" --families gpt --partitions iid --fractions 0.4,0.2 --methods fedlns_default \
      --attacks "$old,$new" --seeds "$seed"
  "$sim" sweep "${common[@]}" --families gpt --partitions iid --fractions 0 --methods fedlns_default --seeds "$seed"
  "$sim" sweep "${common[@]}" --families gpt --partitions iid --fractions 0.4,0.2 --methods "$methods" \
      --attacks "$new" --seeds "$seed"
done
for seed in $seeds; do
  for setting in "gpt noniid" "llama iid"; do
    set -- $setting
    "$sim" sweep "${common[@]}" --families "$1" --partitions "$2" --fractions 0.4,0.2 \
        --methods fedavg,flame,fedlns_default --attacks "target_corruption,norm_freeze,ipm,$new" --seeds "$seed"
    # the paper's rule only under the attacks that broke it (it meets the new ones in the GPT IID matrix)
    "$sim" sweep "${common[@]}" --families "$1" --partitions "$2" --fractions 0.4,0.2 \
        --methods fedlns --attacks target_corruption,norm_freeze,ipm --seeds "$seed"
    "$sim" sweep "${common[@]}" --families "$1" --partitions "$2" --fractions 0 --methods fedlns_default \
        --seeds "$seed"
  done
done
