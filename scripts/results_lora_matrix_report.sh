#!/usr/bin/env bash
# docs/results/lora-matrix from the runs of scripts/results_lora_matrix.sh: per payload folder (frozen/: adapters
# only; norms/: adapters and norms) the archive, the report's tables and plots, and matrix.md, the plan's table and
# target checks over the seeds (scripts/lora_matrix_table.py), with matrix-seedN.md the same for each seed alone (a
# cell shows where every seed asked for has run). Folders without runs are skipped.
#
# Usage: bash scripts/results_lora_matrix_report.sh RUNS_DIR [DEST] [SEEDS]
#   (default DEST: docs/results/lora-matrix; SEEDS: the seeds the tables average over, default 100,200,300)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), PYTHON (default .venv/bin/python).
set -euo pipefail
runs="${1:?usage: results_lora_matrix_report.sh RUNS_DIR [DEST] [SEEDS]}"
dest="${2:-docs/results/lora-matrix}"
seeds="${3:-100,200,300}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
python="${PYTHON:-.venv/bin/python}"
declare -A label=([frozen]="adapters only, norms frozen" [norms]="adapters and norms")
# The cells verify.txt names: FedLNS() at seed 100 (the first code) and 300 (the second), FLAME, and BERT at seed 200
# (made on another kind of processor, an Intel Xeon with AVX512-FP16: it re-runs to the bit only on its kind).
frozen_cells=gpt-iid-mal40-fedlns_default-act50-seed100-f6a9fb89,llama-iid-mal40-fedlns_default-act50-seed300-735fd973
frozen_cells+=,gpt-iid-mal40-flame-act50-seed100-f300d8d5,bert-iid-mal40-fedlns_default-act50-seed200-8501b169
declare -A cell=([frozen]="$frozen_cells" [norms]="gpt-iid-mal40-fedlns_default-act50-seed100-a1f4b22a")

for payload in frozen norms; do
  [ -d "$runs/$payload" ] || continue
  if [ -n "${cell[$payload]}" ]; then
    "$sim" archive "$runs/$payload" "$dest/$payload" --verify-cells "${cell[$payload]}"
  else
    "$sim" archive "$runs/$payload" "$dest/$payload"
  fi
  "$sim" report "$dest/$payload" --out "$dest/$payload" --allow-mixed-code
  "$python" scripts/lora_matrix_table.py "$dest/$payload" --seeds "$seeds" --payload "${label[$payload]}" \
      > "$dest/$payload/matrix.md"
  for seed in ${seeds//,/ }; do
    "$python" scripts/lora_matrix_table.py "$dest/$payload" --seeds "$seed" --payload "${label[$payload]}" \
        > "$dest/$payload/matrix-seed$seed.md"
  done
done
