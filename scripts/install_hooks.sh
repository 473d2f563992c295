#!/usr/bin/env bash
# Install the git pre-commit hooks of .pre-commit-config.yaml. pre-commit gets its own environment,
# .venv-hooks: its virtualenv needs packaging>=26, which flwr in .venv refuses. The hooks themselves run
# .venv's pinned ruff and mypy, so .venv is built (or checked) first.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh
[ -x .venv-hooks/bin/python ] || "${PYTHON:-python3}" -m venv .venv-hooks
.venv-hooks/bin/python -m pip install --quiet "pre-commit==4.7.0"
.venv-hooks/bin/pre-commit install
