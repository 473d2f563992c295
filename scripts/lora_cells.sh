# Sourced by the LoRA-scenario study scripts: the scenario's settings (adapters only, the matrix's learning rates),
# the simulator (FEDLNS_SIM, default .venv/bin/fedlns-sim), the parts to run (PART, default all) and one sweep of one
# cell. The sourcing script sets runs (the runs folder) and may add to common (sweep options for every run).

sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
common=(--preset lora --jobs "${JOBS:-2}" --no-progress --set peft_norms=false --set signature=auto --no-references)
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
