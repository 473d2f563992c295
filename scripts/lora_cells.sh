# Sourced by the LoRA-scenario study scripts: the scenario's settings (adapters only, the matrix's learning rates),
# the simulator (FEDLNS_SIM, default .venv/bin/fedlns-sim), the parts to run (PART, default all), one sweep of one
# cell and a study's pair of sweeps of one cell. The sourcing script sets runs (the runs folder) and candidate (its
# settings) and may add to common (sweep options for every run).

sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
# FedLNS()'s vote before docs/results/placed-vote made cohort_vote="settled" its default, the one every study that
# sources this file ran it with: pinned in every sweep so that they re-run (and resume) as made; a study of another
# vote sets its own after it.
round_vote=(--set cohort_vote=round)
common=(--preset lora --jobs "${JOBS:-2}" --no-progress --set peft_norms=false --set signature=auto --no-references
  "${round_vote[@]}")
part="${PART:-all}"

rate() { case "$1" in gpt | llama) echo 1e-2 ;; bert) echo 5e-3 ;; esac; }

# lora_sweep FAMILY PARTITION FRACTION SEED ATTACK [SWEEP OPTIONS...]: one sweep of the cell, at the family's
# learning rate (no attack named at 0%).
lora_sweep() {
  local family="$1" partition="$2" fraction="$3" seed="$4" attack="$5"
  shift 5
  local args=("${common[@]}" --families "$family" --partitions "$partition" --fractions "$fraction"
    --seeds "$seed" --set learning_rate="$(rate "$family")" --out "$runs")
  [ "$fraction" = 0 ] || args+=(--attacks "$attack")
  "$sim" sweep "${args[@]}" "$@"
}

# FedLNS() as it shipped before docs/results/adaptive made cohort_weight="agreeing" and cohort_undecided="adaptive" its
# defaults: what the studies below measured their candidates against, pinned so that they re-run (and resume) as made.
previous=(--set cohort_weight=unit --set cohort_undecided=support)

# cell FAMILY PARTITION FRACTION SEED ATTACK [METHODS]: one cell's previous default (and METHODS) and the sourcing
# script's candidate (its `candidate` array: the settings it changes from the previous default).
cell() {
  lora_sweep "${@:1:5}" --methods "fedlns_default${6:+,$6}" "${previous[@]}"
  lora_sweep "${@:1:5}" --methods fedlns_default "${previous[@]}" "${candidate[@]}"
}

# seed_cells SEED [ATTACK...]: cohort-weight/seeds' cells at one seed through cell(), PART
# choosing attacks, regression or both; each ATTACK runs beside weak_core (40% IID, with FedAvg) on every family.
seed_cells() {
  local seed="$1" family attack
  shift
  if [ "$part" = all ] || [ "$part" = attacks ]; then
    # A. weak_core (and the ATTACKs) 40% IID with FedAvg; B. majority_only, GPT 40% IID; D. target corruption 40% IID.
    for family in gpt llama bert; do
      for attack in weak_core "$@"; do cell "$family" iid 0.4 "$seed" "$attack" fedavg; done
    done
    cell gpt iid 0.4 "$seed" majority_only fedavg
    for family in gpt llama bert; do cell "$family" iid 0.4 "$seed" target_corruption; done
  fi
  if [ "$part" = all ] || [ "$part" = regression ]; then
    # C. No attackers, non-IID (BERT with clean FedAvg); E. ALIE at 20%: BERT IID, LLaMA non-IID.
    cell bert noniid 0 "$seed" none fedavg
    cell gpt noniid 0 "$seed" none
    cell bert iid 0.2 "$seed" alie
    cell llama noniid 0.2 "$seed" alie
  fi
}

# FedLNS() as it ships (the settled vote, over common's pin of the round vote); pair FAMILY PARTITION FRACTION SEED
# ATTACK: it and the sourcing script's candidate (its `candidate` array) in one cell; trio: FedAvg, then the pair.
shipped=(--methods fedlns_default --set cohort_vote=settled)
pair() {
  lora_sweep "$@" "${shipped[@]}"
  lora_sweep "$@" "${candidate[@]}"
}
trio() {
  lora_sweep "$@" --methods fedavg
  pair "$@"
}
