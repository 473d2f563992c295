#!/usr/bin/env bash
# docs/results/confirmed-cut: FedLNS(cohort_cut="confirmed") beside the default on the cells of its PLAN.md.
# Resumable (finished runs are skipped).
# Usage: bash scripts/results_confirmed_cut.sh RUNS [STEP]; STEP one of quick, lora, blend, cpu, matrix, lora-matrix,
# lora-matrix-bert, cohort, lora-matrix-bert-seeds, side-join, all (the default). Environment: FEDLNS_SIM (default
# .venv/bin/fedlns-sim).
set -euo pipefail
runs="${1:?usage: results_confirmed_cut.sh RUNS [STEP] (the steps: see the first lines)}"
step="${2:-all}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
# FedLNS() as it shipped when these runs were made (the unit weight, the support fallback, the round vote), pinned so
# that the script re-runs and resumes them as made after the defaults changed; each step sets the cut it measures.
common=(--jobs 2 --no-progress --set cohort_weight=unit --set cohort_undecided=support --set cohort_vote=round)
frozen=(--preset lora "${common[@]}" --set peft_norms=false --set signature=auto)  # lora-matrix's frozen/ payload

if [[ $step == quick || $step == all ]]; then  # full-model training from scratch, the quickstart's setting
  quick=(--preset quick "${common[@]}" --families gpt,bert,llama --partitions iid --fractions 0.4 --seeds 100,200,300)
  "$sim" sweep "${quick[@]}" --methods fedavg,fedlns_default --set cohort_cut=tree --out "$runs/quick"
  "$sim" sweep "${quick[@]}" --methods fedlns_default --no-references --set cohort_cut=confirmed --out "$runs/quick"
fi

lora=("${frozen[@]}" --families gpt --set learning_rate=1e-2)
if [[ $step == lora || $step == all ]]; then  # adapters only, GPT IID, seed 100: attacks written against the rule
  for cut in tree confirmed; do
    "$sim" sweep "${lora[@]}" --seeds 100 --partitions iid --fractions 0.4 --methods fedlns_default \
        --attacks cut_blend,sleeper,majority_only --no-references --set cohort_cut="$cut" --out "$runs/lora"
    "$sim" sweep "${lora[@]}" --seeds 100 --partitions iid --fractions 0.2 --methods fedlns_default \
        --attacks target_corruption --no-references --set cohort_cut="$cut" --out "$runs/lora"
    "$sim" sweep "${lora[@]}" --seeds 100 --partitions noniid --fractions 0 --methods fedlns_default --no-references \
        --set cohort_cut="$cut" --out "$runs/lora"
  done
  "$sim" sweep "${lora[@]}" --seeds 100 --partitions iid --fractions 0.4 --methods fedavg --attacks sleeper \
      --out "$runs/lora"
  "$sim" sweep "${lora[@]}" --seeds 100 --partitions iid --fractions 0.2 --methods fedavg --attacks target_corruption \
      --out "$runs/lora"
fi

if [[ $step == blend || $step == all ]]; then  # the follow-up: the attacks written against the cut, more seeds
  for cut in tree confirmed; do
    "$sim" sweep "${lora[@]}" --partitions iid --fractions 0.4 --methods fedlns_default --attacks cut_blend \
        --seeds 200,300 --no-references --set cohort_cut="$cut" --out "$runs/lora"
    "$sim" sweep "${lora[@]}" --seeds 100 --partitions iid --fractions 0.4 --methods fedlns_default \
        --attacks half_blend --no-references --set cohort_cut="$cut" --out "$runs/lora"
  done
fi

if [[ $step == matrix || $step == all ]]; then  # the second follow-up: what gets through the default, from scratch
  for cut in tree confirmed; do
    "$sim" sweep --preset cpu "${common[@]}" --set batch_clients=auto --families gpt --partitions iid --fractions 0.4 \
        --seeds 100 --methods fedlns_default --attacks target_corruption,alie,minmax,backdoor,band_mimic,ipm_search \
        --no-references --set cohort_cut="$cut" --out "$runs/cpu"
    "$sim" sweep --preset cpu "${common[@]}" --families bert --partitions iid --fractions 0.4 --seeds 200,300 \
        --methods fedlns_default --no-references --set cohort_cut="$cut" --out "$runs/cpu"
  done
fi

if [[ $step == cpu || $step == all ]]; then  # the cpu preset's BERT (docs/attacks.md, "Where it fails: BERT")
  for cut in tree confirmed; do
    "$sim" sweep --preset cpu "${common[@]}" --families bert --partitions iid --fractions 0.4 --seeds 100 \
        --methods fedlns_default --no-references --set cohort_cut="$cut" --out "$runs/cpu"
  done
fi

# lora-matrix's cells (its frozen/ payload), seed 200, the default's pair and the variant's each
matrix=("${frozen[@]}" --seeds 200 --partitions iid,noniid --methods fedlns_default --no-references)
if [[ $step == lora-matrix || $step == all ]]; then  # the third follow-up: lora-matrix's GPT and LLaMA cells, seed 200
  for fraction in 0.4 0.2; do
    cells=("--fractions $fraction --attacks target_corruption,backdoor,ipm,alie,lora_quiet,lora_band")
    [[ $fraction == 0.4 ]] && cells+=("--fractions 0")  # without attackers, once
    for family in gpt llama; do
      for cut in tree confirmed; do
        for cell in "${cells[@]}"; do
          # shellcheck disable=SC2086  # $cell: the cell's options, split on purpose
          "$sim" sweep "${matrix[@]}" --families "$family" --set learning_rate=1e-2 $cell --set cohort_cut="$cut" \
              --out "$runs/lora-matrix"
        done
      done
    done
  done
fi

if [[ $step == lora-matrix-bert || $step == all ]]; then  # the fourth follow-up: BERT's cells, seed 200
  for cell in "--fractions 0" "--fractions 0.2 --attacks target_corruption,alie" \
      "--fractions 0.4 --attacks target_corruption"; do
    for cut in tree confirmed; do  # each cell's pair before the next cell
      # shellcheck disable=SC2086  # $cell: the cell's options, split on purpose
      "$sim" sweep "${matrix[@]}" --families bert --set learning_rate=5e-3 $cell --set cohort_cut="$cut" \
          --out "$runs/lora-matrix"
    done
  done
fi

# The fifth follow-up: the variant in every cell; the default beside it where its cut fired (and under cut_blend,
# whose attack changes with the setting). `pairs FOLDER ARGS...` re-runs the default of each such cell of FOLDER.
pairs() {
  local folder="$1" cell
  shift
  .venv/bin/python scripts/confirmed_cut_table.py --fired "$folder" | while read -r cell; do
    [[ -n $cell ]] || continue  # never an empty cell: a sweep without one would run the preset's whole grid
    # shellcheck disable=SC2086  # $cell: the cell's options, split on purpose
    "$sim" sweep "$@" $cell --set cohort_cut=tree --out "$folder"
  done
}

if [[ $step == cohort || $step == all ]]; then  # cohort/'s cpu matrix at seed 100 (scripts/results_cohort.sh's cells)
  cohort=(--preset cpu --set batch_clients=auto "${common[@]}" --seeds 100 --methods fedlns_default --no-references)
  old=target_corruption,backdoor,sign_flip,scaling,gaussian,alie,ipm,minmax,norm_mimicry,norm_freeze,decoy
  new=norm_noise,band_mimic,ipm_search,majority_only
  cells=("--families gpt --partitions iid --fractions 0.4,0.2 --attacks $old,delta_budget,$new"
         "--families gpt --partitions iid --fractions 0.4 --attacks sleeper"
         "--families gpt --partitions iid --fractions 0")
  for setting in "gpt noniid" "llama iid"; do
    set -- $setting
    cells+=("--families $1 --partitions $2 --fractions 0.4,0.2 --attacks target_corruption,norm_freeze,ipm,$new"
            "--families $1 --partitions $2 --fractions 0")
  done
  for cell in "${cells[@]}"; do
    # shellcheck disable=SC2086  # $cell: the cell's options, split on purpose
    "$sim" sweep "${cohort[@]}" $cell --set cohort_cut=confirmed --out "$runs/cohort"
  done
  for cut in tree confirmed; do  # the attack written against the cut
    "$sim" sweep "${cohort[@]}" --families gpt --partitions iid --fractions 0.4 --attacks cut_blend \
        --set cohort_cut="$cut" --out "$runs/cohort"
  done
  pairs "$runs/cohort" "${cohort[@]}"
fi

if [[ $step == lora-matrix-bert-seeds || $step == all ]]; then  # lora-matrix's 26 BERT cells, seeds 100 then 300
  bert=("${frozen[@]}" --partitions iid,noniid --methods fedlns_default --no-references --families bert
        --set learning_rate=5e-3)
  attacks=target_corruption,backdoor,ipm,alie,lora_quiet,lora_band
  for seed in 100 300; do
    for cell in "--fractions 0" "--fractions 0.4,0.2 --attacks $attacks"; do
      # shellcheck disable=SC2086  # $cell: the cell's options, split on purpose
      "$sim" sweep "${bert[@]}" --seeds "$seed" $cell --set cohort_cut=confirmed --out "$runs/lora-matrix-bert"
    done
    pairs "$runs/lora-matrix-bert" "${bert[@]}"
  done
fi

if [[ $step == side-join || $step == all ]]; then  # the sixth follow-up: the attack written against the confirmed cut
  join=("${frozen[@]}" --partitions iid --fractions 0.4 --attacks side_join --out "$runs/side-join")
  "$sim" sweep "${join[@]}" --families gpt --set learning_rate=1e-2 --seeds 100,200,300 --methods fedavg --no-references
  for cut in tree confirmed; do
    "$sim" sweep "${join[@]}" --families gpt --set learning_rate=1e-2 --seeds 100,200,300 --methods fedlns_default \
        --no-references --set cohort_cut="$cut"
  done
  for cut in tree confirmed; do
    "$sim" sweep "${join[@]}" --families bert --set learning_rate=5e-3 --seeds 100 --methods fedlns_default \
        --no-references --set cohort_cut="$cut"
    "$sim" sweep --preset cpu --set batch_clients=auto "${common[@]}" --families gpt --partitions iid --fractions 0.4 \
        --seeds 100 --methods fedlns_default --attacks side_join --no-references --set cohort_cut="$cut" \
        --out "$runs/cpu"  # beside the cpu preset's other cells: a table cell is family, partition, fraction, attack
  done
fi
