#!/usr/bin/env bash
# The runs behind docs/results/lora-matrix/warmup: FedLNS() in the LoRA scenario (seed 100, adapters only) with
# warmup="hold" and warmup="screen", against the matrix's own warmup="aggregate" runs. Resumable: finished runs
# are skipped.
#
# Usage: bash scripts/results_lora_warmup.sh [RUNS_DIR]   (default runs/lora-warmup)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/lora-warmup}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
# FedLNS() as it shipped when these runs were made (the tree's cut, the unit weight, the support fallback, the round
# vote), pinned so that the script re-runs and resumes them as made after the defaults changed.
base=(--preset lora --jobs "${JOBS:-2}" --no-progress --no-references --seeds 100 --set peft_norms=false
  --set signature=auto --set cohort_cut=tree --set cohort_weight=unit --set cohort_undecided=support
  --set cohort_vote=round)
common=("${base[@]}" --methods fedlns_default)

for warmup in hold screen; do
  out=(--set default_warmup="$warmup" --out "$runs/$warmup")
  "$sim" sweep "${common[@]}" "${out[@]}" --families gpt,llama --partitions iid,noniid --fractions 0.4 \
      --set learning_rate=1e-2
  "$sim" sweep "${common[@]}" "${out[@]}" --families gpt --partitions noniid --fractions 0 --set learning_rate=1e-2
  "$sim" sweep "${common[@]}" "${out[@]}" --families bert --partitions iid --fractions 0.4 --set learning_rate=5e-3
done
"$sim" sweep "${common[@]}" --set default_warmup=screen --out "$runs/screen" --families gpt --partitions iid \
    --fractions 0.4 --attacks backdoor,ipm,alie,lora_quiet,lora_band,majority_only --set learning_rate=1e-2
# FedAvg and FedLNS() as it is (warmup="aggregate") under majority_only, which the matrix does not run: added after
# the plan's runs, as references for its one cell.
"$sim" sweep "${base[@]}" --methods fedavg,fedlns_default --families gpt --partitions iid --fractions 0.4 \
    --attacks majority_only --set learning_rate=1e-2 --out "$runs/aggregate"
