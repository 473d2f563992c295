#!/usr/bin/env bash
# The runs behind docs/results/cpu, in the order they were made. Every step skips finished runs, so running the
# script again resumes where it stopped (a killed run resumes from its last completed round).
#
# Usage: bash scripts/results_cpu.sh [RUNS_DIR]        (default: runs/cpu; two processes, for 2 cores)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), FEDLNS_DATA (default ../shared/data), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/cpu}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
jobs="${JOBS:-2}"
sweep() { "$sim" sweep --preset cpu --jobs "$jobs" --no-progress "$@"; }

# 1. The 40% comparison: the seven methods, and per seed the clean run (FedAvg, 0%) and the oracle, one seed at a
#    time so that a partial run of this script still gives whole seeds. Seed 100 is followed by the runs that test
#    why the old preset (2 AdamW steps per client) was unstable: FedLNS on GPT and LLaMA with 2, 4 and 8 steps,
#    signatures recorded for offline replay (python -m fedlns_sim.replay).
for seed in 100 200 300 400 500; do
  sweep --seeds "$seed" --out "$runs"
  if [ "$seed" = 100 ]; then
    for blocks in 800 1600 3200; do
      sweep --families gpt,llama --methods fedlns --seeds 100,200,300 --no-references \
            --set max_train_blocks="$blocks" --set record_signatures=true --out "$runs-steps"
    done
  fi
done

# 2. The fraction sweep (0/10/20/30/40%, the layout of the paper's appendix tables) for FedAvg, FedLNS and the two
#    strongest baselines, seeds 100-300 as in the paper. The baselines were named before this step ran, from
#    baseline numbers only: the geometric mean over the finished 40% settings (seeds 100 and 200, 8 settings) of
#    each baseline's best-checkpoint perplexity relative to FedAvg's: FLAME 0.97, Norm-Bounded FedAvg 1.01,
#    Multi-Krum 1.04, Median and Trimmed Mean 1.05. The 40% cells and FedAvg at 0% come from step 1.
for seed in 100 200 300; do
  sweep --seeds "$seed" --fractions 0,0.1,0.2,0.3 --methods fedavg,fedlns,flame,norm_bounded_fedavg \
        --no-references --out "$runs"
done
