#!/usr/bin/env bash
# The runs behind docs/results/attacks: every attack against every method (the seven of the paper's comparison
# and FedLNS in front of Multi-Krum, Median and Norm-Bound), GPT, IID, 20% and 40% malicious, seeds 100-300, with
# the clean and oracle references and every defence in clean rounds (0%), in the cpu preset. Every step skips
# finished runs: run it again to resume.
# GPT has no dropout in the cpu preset, so a round's clients train as one batched model (batch_clients=auto:
# the sequential numbers up to float rounding, about 1.7x faster on 2 cores; docs/performance.md).
#
# Usage: bash scripts/results_attacks.sh [RUNS_DIR]     (default: runs/attacks; two processes, for 2 cores)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), FEDLNS_DATA (default ../shared/data), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/attacks}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
methods=fedavg,norm_bounded_fedavg,coordinate_median,trimmed_mean,multi_krum,flame,fedlns,fedlns_multi_krum,fedlns_median,fedlns_norm_bound
attacks=target_corruption,backdoor,sign_flip,scaling,gaussian,alie,ipm,minmax,norm_mimicry,norm_freeze,decoy,delta_budget
for seed in 100 200 300; do   # one seed at a time, so that a partial run still gives whole seeds
  "$sim" sweep --preset cpu --families gpt --partitions iid --fractions 0.2,0.4 --methods "$methods" \
      --attacks "$attacks" --seeds "$seed" --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs"
done
# What each defence costs when nobody attacks: every method but FedAvg (the clean reference above) at 0%.
"$sim" sweep --preset cpu --families gpt --partitions iid --fractions 0 --methods "${methods#fedavg,}" \
    --seeds 100,200,300 --set batch_clients=auto --jobs "${JOBS:-2}" --no-progress --out "$runs"
"$sim" report "$runs" --out docs/results/attacks
