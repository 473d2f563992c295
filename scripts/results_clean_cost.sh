#!/usr/bin/env bash
# The runs behind docs/results/cpu-clean: what FedLNS costs in clean rounds (0% malicious), split into its two
# parts, on GPT (cpu preset, both partitions, seeds 100-300). Four variants of FedLNS, each in its own folder beside
# the same clean FedAvg runs (so that each folder's report pairs FedLNS with clean FedAvg by seed):
#   paper-hold          the paper's rule and warm-up (eq. FedLNS_skip_update: the global model is held until the
#                       bank reaches the activation coverage); what docs/results/cpu runs
#   paper-aggregate     the paper's rule, every client averaged before activation (FedLNS(warmup="aggregate"))
#   guarded-hold        the rule rule_for_round_size gives for 10 clients per round, the paper's warm-up
#   guarded-aggregate   both changes
# Every step skips finished runs: run it again to resume.
#
# Usage: bash scripts/results_clean_cost.sh [RUNS_DIR]     (default: runs/clean)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), FEDLNS_DATA (default ../shared/data), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/clean}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
sweep() { "$sim" sweep --preset cpu --families gpt --fractions 0 --seeds 100,200,300 --no-references \
                 --jobs "${JOBS:-2}" --no-progress "$@"; }

sweep --methods fedavg --out "$runs/clean-fedavg"
declare -A settings=([paper-hold]="" [paper-aggregate]="--set warmup=aggregate"
                     [guarded-hold]="--set retain_rule=for_federation"
                     [guarded-aggregate]="--set retain_rule=for_federation --set warmup=aggregate")
for variant in paper-hold paper-aggregate guarded-hold guarded-aggregate; do
  mkdir -p "$runs/$variant"
  cp -rn "$runs"/clean-fedavg/gpt-* "$runs/$variant/"     # the shared reference (finished runs are skipped)
  # shellcheck disable=SC2086   # the settings are words
  sweep --methods fedlns ${settings[$variant]} --out "$runs/$variant"
done
# Reports are made once, from the archived runs (docs/results/cpu-clean/README.md, "How it was made").
