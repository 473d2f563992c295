#!/usr/bin/env bash
# The runs behind docs/results/cohort-weight: FedLNS(cohort_weight="coherence") in the LoRA scenario against the
# default (cohort_weight="unit") on the same machine, with the attacks written against it first (PLAN.md, fixed
# before the runs). The settings are lora-matrix/frozen's (cohort_cut=tree pinned, as there), so that its runs made
# on the same machine are this study's default runs. Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_cohort_weight.sh [RUNS_DIR]   (default runs/cohort-weight)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2), PART (default all: attacks, failures,
# regression).
set -euo pipefail
runs="${1:-runs/cohort-weight}"
# shellcheck source=scripts/lora_cells.sh
. "$(dirname "$0")/lora_cells.sh"
common+=(--set cohort_cut=tree)
candidate=(--set cohort_weight=coherence)

if [ "$part" = all ] || [ "$part" = attacks ]; then
  # A. Against it: weak_core (written for it) with FedAvg; the attacks written against the history.
  for family in gpt bert; do cell "$family" iid 0.4 300 weak_core fedavg; done
  for attack in sleeper side_join majority_only cut_blend; do cell gpt iid 0.4 300 "$attack" fedavg; done
fi
if [ "$part" = all ] || [ "$part" = failures ]; then
  # B. The 14 cells of lora-matrix/frozen whose FedLNS() run kept only attackers in a round.
  cell bert iid 0.2 300 alie; cell bert iid 0.2 300 lora_band
  cell bert noniid 0.2 200 alie; cell bert noniid 0.2 300 alie
  cell gpt noniid 0.2 100 backdoor; cell gpt noniid 0.4 100 alie
  cell llama iid 0.2 100 alie; cell llama noniid 0.2 100 alie
  cell llama noniid 0.2 100 lora_band; cell llama noniid 0.4 100 backdoor
  cell bert iid 0.2 100 alie; cell bert iid 0.2 100 lora_band
  cell bert iid 0.2 100 lora_quiet; cell bert iid 0.4 100 backdoor
fi
if [ "$part" = all ] || [ "$part" = regression ]; then
  # C. 40% target corruption and no attackers (seeds 200, 300); BERT at 20% under the six attacks (seed 300).
  for seed in 300 200; do
    for family in gpt llama bert; do
      for partition in iid noniid; do
        cell "$family" "$partition" 0.4 "$seed" target_corruption
        cell "$family" "$partition" 0 "$seed" none
      done
    done
  done
  for attack in target_corruption backdoor ipm alie lora_quiet lora_band; do
    for partition in iid noniid; do cell bert "$partition" 0.2 300 "$attack"; done
  done
fi
