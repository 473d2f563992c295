#!/usr/bin/env bash
# The lint, format and type checks (configured in pyproject.toml), with the pinned ruff and mypy of the
# dev extra: builds .venv first (scripts/env.sh, a no-op when it is current). Seconds once it exists.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh
.venv/bin/ruff check
.venv/bin/mypy
.venv/bin/ruff format --check
