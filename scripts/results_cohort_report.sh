#!/usr/bin/env bash
# docs/results/cohort from the runs of scripts/results_cohort.sh: the archive, the report (its plots and tables over
# these runs joined with docs/results/attacks' and docs/results/robust's archives, which hold every other method of
# the cells, and the support rule) and matrix.md, the tables and target checks of scripts/robust_table.py.
#
# Usage: bash scripts/results_cohort_report.sh RUNS_DIR [DEST] [SEEDS]
#   (default DEST: docs/results/cohort; SEEDS: the seeds every table averages over, default 100,200,300)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), PYTHON (default .venv/bin/python).
set -euo pipefail
runs="${1:?usage: results_cohort_report.sh RUNS_DIR [DEST] [SEEDS]}"
dest="${2:-docs/results/cohort}"
seeds="${3:-100,200,300}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
python="${PYTHON:-.venv/bin/python}"
cells=gpt-iid-mal40-fedlns_default-act50-seed100-6a3d9b89,gpt-iid-mal40-fedlns_default-act50-seed100-norm_freeze-937d425b
cells="$cells,llama-iid-mal40-fedlns_default-act50-seed100-majority_only-debcf49a"

"$sim" archive "$runs" "$dest" --verify-cells "$cells"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
joined="$scratch/runs"  # the report names the folder it read: the same name every time
mkdir "$joined"
tar -xJf docs/results/attacks/runs.tar.xz -C "$joined"
tar -xJf docs/results/robust/runs.tar.xz -C "$joined"
tar -xJf "$dest/runs.tar.xz" -C "$joined"
"$sim" report "$joined" --out "$dest" --allow-mixed-code
"$python" scripts/robust_table.py docs/results/robust "$dest" --seeds "$seeds" > "$dest/matrix.md"
