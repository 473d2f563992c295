#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv with every extra except FedML's
# (FedML needs its own environment: scripts/setup_fedml_env.sh). Idempotent: a stamp file records the
# hash of pyproject.toml and of this script, and the install is skipped when neither changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
venv="$root/.venv"
stamp="$venv/.fedlns-env-stamp"
want="$(cat pyproject.toml scripts/env.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$venv/bin/python" -c "import fedlns_core, torch, flwr" 2>/dev/null; then
  exit 0
fi
echo "setting up $venv ..." >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The CPU build of torch first: a bare torch requirement can pull a multi-GB CUDA build.
"$venv/bin/python" -m pip install --quiet "torch==2.13.0"
"$venv/bin/python" -m pip install --quiet -e ".[torch,flower,sim,peft,dev]"
echo "$want" > "$stamp"
