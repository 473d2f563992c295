#!/usr/bin/env bash
# Build the separate FedML environment used by tests/fedml (see docs/fedml.md).
#
# FedML 0.9.6 cannot share an environment with flwr (it pins requests<2.32, flwr
# needs requests>=2.33) and a plain `pip install fedml` pulls a CUDA torchvision
# and downgrades numpy/protobuf. So the recipe is: CPU torch first, numpy 2,
# then fedml with --no-deps plus the few runtime dependencies its import and its
# single-process simulation actually need.
#
# Idempotent: a stamp file inside the environment records the hash of this
# script; when it matches, nothing is done. Pass --force to rebuild from scratch.
#
# Usage: bash scripts/setup_fedml_env.sh [--force]
# Environment: FEDML_VENV (default: <repo>/.venv-fedml), PYTHON (default: python3).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${FEDML_VENV:-$repo_root/.venv-fedml}"
python="${PYTHON:-python3}"
stamp="$venv/.fedlns-recipe"
recipe_hash="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"

if [[ "${1:-}" != "--force" && -f "$stamp" && -x "$venv/bin/python" \
      && "$(cat "$stamp")" == "$recipe_hash" ]]; then
    echo "setup_fedml_env: $venv is up to date (recipe $recipe_hash)"
    exit 0
fi

start=$(date +%s)
# Only ever delete what is a virtual environment (or an unfinished one of ours).
if [[ -e "$venv" && ! -f "$venv/pyvenv.cfg" ]]; then
    echo "setup_fedml_env: $venv exists and is not a virtual environment; not touching it" >&2
    exit 1
fi
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --no-input --progress-bar off)

# 1. CPU torch first, pinned: a bare `torch` resolves to a multi-GB CUDA build.
#    The machines carry the 2.13.0+cpu wheel in pip's find-links; `==2.13.0` matches
#    it and pip prefers the local +cpu label over the plain (CUDA) release.
"${pip[@]}" "torch==2.13.0"
# 2. The core's own dependencies and the test tools (numpy 2: fedml would pull 1.26).
"${pip[@]}" "numpy>=2" scipy scikit-learn pytest hypothesis
# 3. FedML without its declared dependencies (they would pull a CUDA torchvision, numpy<2,
#    protobuf 3, wandb 0.13), then the packages that `import fedml` and its single-process
#    simulation really import, resolved normally but held to the torch/numpy above.
#    Left out on purpose: torchvision (the index's wheel is a CUDA build whose ops fail to
#    register beside the CPU torch) and wandb (FedML's pin fails to import on numpy 2);
#    tests/fedml/_import_stubs.py stands in for both (see docs/fedml.md).
"${pip[@]}" --no-deps "fedml==0.9.6"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
printf '%s\n' "torch==2.13.0" "numpy>=2" "requests<2.32" "chardet<6" > "$constraints"
"${pip[@]}" -c "$constraints" "setuptools<81" docker GPUtil "chardet<6" psutil cachetools "paho-mqtt<2" \
    redis boto3 h5py pillow wget prettytable multiprocess python-dotenv PyYAML python-dateutil \
    sqlalchemy httpx fastapi pandas tqdm click "requests<2.32"
# 4. This repository (fedlns_core and fedlns_fedml), editable, without resolving extras.
"${pip[@]}" --no-deps -e "$repo_root"

# 5. Smoke check before stamping: CPU torch, numpy 2, and `import fedml` with the stand-ins
#    (HOME pointed away: importing fedml creates ~/.fedml).
smoke_home="$(mktemp -d)"
HOME="$smoke_home" PYTHONPATH="$repo_root/tests/fedml" "$venv/bin/python" -c "
import numpy, torch
assert int(numpy.__version__.split('.')[0]) >= 2, numpy.__version__
assert not torch.cuda.is_available() and torch.__version__.endswith('+cpu'), torch.__version__
import _import_stubs; _import_stubs.install()
import fedml, fedlns_core, fedlns_fedml
from fedml.simulation.sp.fedavg import FedAvgAPI
print('setup_fedml_env: fedml', fedml.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)
"
rm -rf "$smoke_home"
echo "$recipe_hash" > "$stamp.tmp" && mv "$stamp.tmp" "$stamp"
echo "setup_fedml_env: built $venv in $(( $(date +%s) - start )) s"
