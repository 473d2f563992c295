#!/usr/bin/env bash
# The project's test command: builds the environments it needs, then runs every test.
#   1. the main suite (core, torch and Flower adapters, simulator, README and docstring examples)
#   2. the FedML adapter's suite, in FedML's own environment (it cannot share one with Flower)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh
export RAY_TMPDIR="${RAY_TMPDIR:-$(mktemp -d /tmp/ray.XXXXXX)}"
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
.venv/bin/python -m pytest tests fedlns_core adapters/fedlns_torch adapters/fedlns_flower \
  reference_sim/fedlns_sim README.md "$@"
if [ -f scripts/test_fedml.sh ]; then
  echo "test.sh: next, FedML's suite in its own environment (.venv-fedml). While that environment is built," \
       "pip may print dependency-resolver complaints about fedml's pins: they are expected (fedml is installed" \
       "with --no-deps beside a CPU torch and numpy 2, see docs/fedml.md) and the build checks itself afterwards."
  bash scripts/test_fedml.sh
fi
