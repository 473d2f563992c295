#!/usr/bin/env bash
# The support rule (fedlns_support) against the attack matrix of docs/results/attacks, and the three attacks
# written against it (norm_noise, band_mimic, ipm_search) against every method there: GPT, IID, cpu preset,
# 0/20/40%, one seed at a time. Every step skips finished runs: run it again to resume.
#
# Usage: bash scripts/results_robust.sh [RUNS_DIR] [SEEDS]   (default: runs/robust, "100 200 300")
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/robust}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
common=(--preset cpu --families gpt --partitions iid --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress
        --out "$runs")
first=target_corruption,norm_freeze,ipm,norm_mimicry,norm_noise,band_mimic,ipm_search
rest=backdoor,sign_flip,scaling,gaussian,alie,minmax,decoy,delta_budget
methods=fedavg,norm_bounded_fedavg,coordinate_median,trimmed_mean,multi_krum,flame,fedlns,fedlns_multi_krum,fedlns_median,fedlns_norm_bound
for seed in ${2:-100 200 300}; do
  "$sim" sweep "${common[@]}" --fractions 0.4,0.2 --methods fedlns_support --attacks "$first" --seeds "$seed"
  "$sim" sweep "${common[@]}" --fractions 0 --methods fedlns_support --seeds "$seed"
  "$sim" sweep "${common[@]}" --fractions 0.4,0.2 --methods fedavg,flame,fedlns --attacks norm_noise,band_mimic,ipm_search --seeds "$seed"
  "$sim" sweep "${common[@]}" --fractions 0.4,0.2 --methods fedlns_support --attacks "$rest" --seeds "$seed"
  "$sim" sweep "${common[@]}" --fractions 0.4,0.2 --methods "$methods" --attacks norm_noise,band_mimic,ipm_search --seeds "$seed"
done
