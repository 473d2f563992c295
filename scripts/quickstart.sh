#!/usr/bin/env bash
# The main job on its built-in default: per model family, clean FedAvg, FedAvg and FedLNS with 40% malicious
# clients, and the oracle (reference simulator, `quick` preset, about 4 minutes on 2 idle cores). Uses the data
# folder in $FEDLNS_DATA or ../shared/data when present, else a small synthetic corpus. Extra arguments go to
# `fedlns-sim quickstart`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh
exec .venv/bin/fedlns-sim quickstart "$@"
