#!/usr/bin/env bash
# The main job on its built-in default: a few-minute FedAvg vs FedLNS comparison at 40% malicious
# clients (reference simulator). Uses the data folder in $FEDLNS_DATA or ../shared/data when present,
# else a small synthetic corpus. Extra arguments go to `fedlns-sim quickstart`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh
exec .venv/bin/fedlns-sim quickstart "$@"
