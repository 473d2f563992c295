#!/usr/bin/env bash
# Run the FedML adapter tests in their own environment (FedML 0.9.6 cannot share one with flwr).
#
# Builds .venv-fedml with scripts/setup_fedml_env.sh unless it is already complete for
# the current recipe (a stamp inside it records the recipe's hash), then runs
# tests/fedml and the adapter's doctests with HOME in a temporary directory, since
# importing fedml writes ~/.fedml. Extra arguments go to pytest.
#
# Usage: bash scripts/test_fedml.sh [pytest args...]
# Environment: FEDML_VENV (default: <repo>/.venv-fedml), e.g. a cache directory that
# outlives the checkout; the tests import this checkout's code either way.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${FEDML_VENV:-$repo_root/.venv-fedml}"
export FEDML_VENV="$venv"

setup_start=$(date +%s)
bash "$repo_root/scripts/setup_fedml_env.sh"
echo "test_fedml: environment ready in $(( $(date +%s) - setup_start )) s"

home="$(mktemp -d)"
trap 'rm -rf "$home"' EXIT
cd "$repo_root"
# This checkout's packages first, so that an environment built from another checkout
# (FEDML_VENV pointing at a cache) still tests the code here.
test_start=$(date +%s)
status=0
HOME="$home" PYTHONPATH="$repo_root:$repo_root/adapters${PYTHONPATH:+:$PYTHONPATH}" \
    "$venv/bin/python" -m pytest -p no:cacheprovider tests/fedml adapters/fedlns_fedml "$@" || status=$?
echo "test_fedml: tests took $(( $(date +%s) - test_start )) s"
exit "$status"
