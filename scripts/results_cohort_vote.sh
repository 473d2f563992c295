#!/usr/bin/env bash
# The runs behind docs/results/cohort-vote: FedLNS(cohort_vote="history") and FedLNS(cohort_vote="strong") in the
# LoRA scenario, against the default's cells of docs/results/lora-matrix/frozen, and the attacks written against
# them (PLAN.md, fixed before the runs). Resumable: finished runs are skipped.
#
# Usage: bash scripts/results_cohort_vote.sh [RUNS_DIR]   (default runs/cohort-vote)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/cohort-vote}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
# FedLNS() as it shipped when these runs were made (the tree's cut, the unit weight, the support fallback, the round
# vote), pinned so that the script re-runs and resumes them as made after the defaults changed.
common=(--preset lora --jobs "${JOBS:-2}" --no-progress --set peft_norms=false --set signature=auto --no-references
  --set cohort_cut=tree --set cohort_weight=unit --set cohort_undecided=support --set cohort_vote=round)
attacks=target_corruption,backdoor,ipm,alie,lora_quiet,lora_band
gpt_llama=(--families gpt,llama --set learning_rate=1e-2)
gpt=(--families gpt --set learning_rate=1e-2)

# Against them first: the sleeper under the default vote and FedAvg, then under each vote; the default's
# white-box attacks at 40% on GPT.
for fraction in 0.4 0.2; do
  "$sim" sweep "${common[@]}" "${gpt_llama[@]}" --partitions iid --fractions "$fraction" --attacks sleeper \
      --methods fedavg,fedlns_default --seeds 100 --out "$runs"
done
"$sim" sweep "${common[@]}" "${gpt[@]}" --partitions iid --fractions 0.4 --attacks majority_only \
    --methods fedlns_default --seeds 100 --out "$runs"
for vote in history strong; do
  mine=(--methods fedlns_default --set cohort_vote="$vote")
  "$sim" sweep "${common[@]}" "${gpt_llama[@]}" "${mine[@]}" --partitions iid --fractions 0.4,0.2 \
      --attacks sleeper --seeds 100 --out "$runs"
  "$sim" sweep "${common[@]}" "${gpt[@]}" "${mine[@]}" --partitions iid --fractions 0.4 \
      --attacks majority_only,cut_blend,half_blend --seeds 100 --out "$runs"
done
# The lora-matrix cells, vote by vote: 20%, without attackers (three seeds), 40%; then BERT without attackers.
for vote in history strong; do
  mine=(--methods fedlns_default --set cohort_vote="$vote")
  "$sim" sweep "${common[@]}" "${gpt_llama[@]}" "${mine[@]}" --partitions iid,noniid --fractions 0.2 \
      --attacks "$attacks" --seeds 100 --out "$runs"
  "$sim" sweep "${common[@]}" "${gpt_llama[@]}" "${mine[@]}" --partitions iid,noniid --fractions 0 \
      --seeds 100,200,300 --out "$runs"
done
for vote in history strong; do
  mine=(--methods fedlns_default --set cohort_vote="$vote")
  "$sim" sweep "${common[@]}" "${gpt_llama[@]}" "${mine[@]}" --partitions iid,noniid --fractions 0.4 \
      --attacks "$attacks" --seeds 100 --out "$runs"
  "$sim" sweep "${common[@]}" --families bert --set learning_rate=5e-3 "${mine[@]}" --partitions iid,noniid \
      --fractions 0 --seeds 100 --out "$runs"
done
