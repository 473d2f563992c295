#!/usr/bin/env bash
# docs/results/robust from the runs of scripts/results_robust.sh: the archive, the report (its plots and tables over
# these runs joined with docs/results/attacks' archived matrix, which holds every other method under the twelve
# original attacks) and matrix.md, the tables and target checks of scripts/robust_table.py.
#
# Usage: bash scripts/results_robust_report.sh RUNS_DIR [DEST]   (default DEST: docs/results/robust)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), PYTHON (default .venv/bin/python).
set -euo pipefail
runs="${1:?usage: results_robust_report.sh RUNS_DIR [DEST]}"
dest="${2:-docs/results/robust}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
python="${PYTHON:-.venv/bin/python}"
cells=gpt-iid-mal40-fedlns_default-act50-seed100-3ff17e42,gpt-iid-mal40-fedlns_default-act50-seed100-norm_freeze-1a8ec6a8
cells="$cells,llama-iid-mal40-fedlns_default-act50-seed100-norm_freeze-dd666b14"

"$sim" archive "$runs" "$dest" --verify-cells "$cells"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
joined="$scratch/runs"  # the report names the folder it read: the same name every time
mkdir "$joined"
tar -xJf docs/results/attacks/runs.tar.xz -C "$joined"
tar -xJf "$dest/runs.tar.xz" -C "$joined"          # a run of both folders: the robust one's copy is kept
"$sim" report "$joined" --out "$dest" --allow-mixed-code
"$python" scripts/robust_table.py "$dest" --ours fedlns_support > "$dest/matrix.md"
