#!/usr/bin/env bash
# The runs behind docs/results/quorum: FedLNS(quorum=0.5) against FedLNS() as it ships in the LoRA scenario
# (PLAN.md, fixed before the runs). The default's and FedAvg's runs at seeds 400 and 500 are cohort-weight/seeds'
# (the same settings, the same names): pass that folder as RUNS_DIR, or run them here (PART=defaults).
# Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_quorum.sh [RUNS_DIR]   (default runs/quorum)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), PART (default all: against, clean,
# failures, regression, defaults).
set -euo pipefail
runs="${1:-runs/quorum}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
# run FAMILY PARTITION FRACTION SEED ATTACK METHODS [...]: with the defaults these runs were made with (previous)
run() { lora_sweep "${@:1:5}" --methods "$6" "${previous[@]}" "${@:7}"; }
candidate() { run "$@" fedlns_default --set quorum=0.5; }  # candidate FAMILY PARTITION FRACTION SEED ATTACK
both() { run "$@" fedlns_default; candidate "$@"; }        # the default and the candidate

want() { [ "$part" = all ] || [ "$part" = "$1" ]; }
if want against; then
  # A. weak_core, 40% IID (the default and FedAvg at 400 and 500: cohort-weight/seeds); at seed 300, where it broke
  # the default, the default again as it ships (the first study pinned cohort_cut=tree) and FedAvg.
  for seed in 400 500; do for family in gpt llama bert; do candidate "$family" iid 0.4 "$seed" weak_core; done; done
  for family in gpt bert; do run "$family" iid 0.4 300 weak_core fedavg; both "$family" iid 0.4 300 weak_core; done
fi
if want clean; then
  # C. No attackers: BERT IID (the quorum binds most there) with clean FedAvg, BERT and GPT non-IID.
  for seed in 400 500; do
    run bert iid 0 "$seed" none fedavg; both bert iid 0 "$seed" none
    candidate bert noniid 0 "$seed" none; candidate gpt noniid 0 "$seed" none
  done
fi
if want failures; then
  # B. Cells of the LoRA matrix whose FedLNS() run kept only attackers in a round (lora-matrix/frozen).
  both bert iid 0.2 300 alie; both bert noniid 0.2 300 alie; both bert iid 0.4 100 backdoor
  both gpt noniid 0.2 100 backdoor; both gpt noniid 0.4 100 alie
  both llama iid 0.2 100 alie; both llama noniid 0.2 100 alie; both llama noniid 0.4 100 backdoor
fi
if want regression; then
  # D. 40% target corruption IID; E. majority_only GPT 40% IID; F. ALIE at 20%, BERT IID and LLaMA non-IID.
  for seed in 400 500; do
    for family in gpt llama bert; do candidate "$family" iid 0.4 "$seed" target_corruption; done
    candidate gpt iid 0.4 "$seed" majority_only
    candidate bert iid 0.2 "$seed" alie; candidate llama noniid 0.2 "$seed" alie
  done
fi
if [ "$part" = defaults ]; then  # the default's and FedAvg's runs of cohort-weight/seeds that A and C-F compare with
  SEEDS="400 500" PART=all bash "$(dirname "$0")/results_cohort_weight_seeds.sh" "$runs"
fi
