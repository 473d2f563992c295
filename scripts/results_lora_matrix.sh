#!/usr/bin/env bash
# The runs behind docs/results/lora-matrix: the fine-tuning scenario (`lora` preset) on GPT, BERT and LLaMA, IID and
# non-IID, 0/20/40% malicious, seeds 100-300, against the attacks of docs/results/lora-matrix/PLAN.md. The plan (its
# settings and criteria) was committed before any of these runs. Every step skips finished runs: run it again to
# resume.
#
# Usage: bash scripts/results_lora_matrix.sh STEP [RUNS_DIR]   (default RUNS_DIR: runs/lora-matrix)
#   STEP "lr":     the learning-rate selection for BERT and LLaMA (FedAvg only, selection seeds 11 and 12), into
#                  RUNS_DIR/lr; read the choice with `python scripts/lora_lr_choice.py RUNS_DIR/lr`
#   STEP "targets": the cells the plan's targets read, first: FedAvg and FedLNS() with the references on the
#                  adapters-only payload, seed by seed: 40%, then FedLNS() without attackers, then 20%
#   STEP "matrix": the whole matrix, seed by seed, 40% before 20%, into RUNS_DIR/frozen (adapters only, norms
#                  frozen: the stacks' default) and RUNS_DIR/norms (adapters and norms: the recipe of docs/peft.md);
#                  the runs "targets" made are the same runs, and are skipped
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), JOBS (default 2).
set -euo pipefail
step="${1:?usage: results_lora_matrix.sh lr|targets|matrix [RUNS_DIR]}"
runs="${2:-runs/lora-matrix}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
# The matrix was made before FedLNS() took cohort_cut="confirmed" (which never fired in its cells:
# docs/results/confirmed-cut) and cohort_weight="agreeing", cohort_undecided="adaptive" (docs/results/adaptive)
# and cohort_vote="settled" (docs/results/placed-vote); pinned so that a resumed sweep skips the archived runs instead
# of re-running them.
common=(--preset lora --jobs "${JOBS:-2}" --no-progress --set cohort_cut=tree --set cohort_weight=unit
  --set cohort_undecided=support --set cohort_vote=round)
attacks=target_corruption,backdoor,ipm,alie,lora_quiet,lora_band
baselines=fedavg,flame,multi_krum,coordinate_median,norm_bounded_fedavg
frozen=(--set peft_norms=false --set signature=auto)

# The learning rate of each family, chosen by `lr` and scripts/lora_lr_choice.py (GPT: the preset's own).
rate() {
  case "$1" in
    gpt) echo 1e-2 ;;
    bert) echo 5e-3 ;;
    llama) echo 1e-2 ;;
  esac
}

case "$step" in
  lr)
    for rate in 2e-3 5e-3 1e-2; do
      "$sim" sweep "${common[@]}" --families bert,llama --partitions iid --fractions 0,0.4 --methods fedavg \
          --seeds 11,12 --no-references --set learning_rate="$rate" --out "$runs/lr"
    done
    ;;
  targets)
    for seed in 100 200 300; do
      for fraction in 0.4 0 0.2; do
        for family in gpt llama bert; do
          if [ "$fraction" = 0 ]; then  # FedLNS()'s clean cost (clean FedAvg came with the references)
            "$sim" sweep "${common[@]}" --families "$family" --partitions iid,noniid --fractions 0 \
                --methods fedlns_default --seeds "$seed" "${frozen[@]}" --set learning_rate="$(rate "$family")" \
                --out "$runs/frozen"
          else
            "$sim" sweep "${common[@]}" --families "$family" --partitions iid,noniid --fractions "$fraction" \
                --methods fedavg,fedlns_default --attacks "$attacks" --seeds "$seed" "${frozen[@]}" \
                --set learning_rate="$(rate "$family")" --out "$runs/frozen"
          fi
        done
      done
    done
    ;;
  matrix)
    for seed in 100 200 300; do
      for family in gpt llama bert; do
        for fraction in 0.4 0.2; do
          # Adapters only: every method on what the stacks send; FedLNS() reads the LoRA signature (auto).
          "$sim" sweep "${common[@]}" --families "$family" --partitions iid,noniid --fractions "$fraction" \
              --methods "$baselines,fedlns_default" --attacks "$attacks" --seeds "$seed" \
              "${frozen[@]}" --set learning_rate="$(rate "$family")" --out "$runs/frozen"
          # Adapters and norms: FedLNS() on the norms alone (signature=norms) against the same references.
          "$sim" sweep "${common[@]}" --families "$family" --partitions iid,noniid --fractions "$fraction" \
              --methods fedavg,fedlns_default --attacks "$attacks" --seeds "$seed" \
              --set learning_rate="$(rate "$family")" --out "$runs/norms"
        done
        # Without attackers: FedLNS()'s clean cost on each payload (clean FedAvg comes with the sweeps above).
        "$sim" sweep "${common[@]}" --families "$family" --partitions iid,noniid --fractions 0 \
            --methods fedlns_default --seeds "$seed" "${frozen[@]}" \
            --set learning_rate="$(rate "$family")" --out "$runs/frozen"
        "$sim" sweep "${common[@]}" --families "$family" --partitions iid,noniid --fractions 0 \
            --methods fedlns_default --seeds "$seed" \
            --set learning_rate="$(rate "$family")" --out "$runs/norms"
      done
    done
    ;;
  *) echo "unknown step $step (lr, targets or matrix)" >&2; exit 2 ;;
esac
