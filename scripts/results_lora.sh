#!/usr/bin/env bash
# The runs behind docs/results/lora: the fine-tuning scenario (`lora` preset: a GPT base pretrained on WikiText,
# federated LoRA fine-tuning on StackOverflow posts), 40% malicious, IID and non-IID, seeds 100-300. Every step
# skips finished runs, so running the script again resumes where it stopped.
#
# Usage: bash scripts/results_lora.sh [RUNS_DIR]        (default: runs/lora; step 2 writes RUNS_DIR-frozen)
# Environment: FEDLNS_SIM (default .venv/bin/fedlns-sim), FEDLNS_DATA (default ../shared/data), JOBS (default 2).
set -euo pipefail
runs="${1:-runs/lora}"
sim="${FEDLNS_SIM:-.venv/bin/fedlns-sim}"
jobs="${JOBS:-2}"
sweep() { "$sim" sweep --preset lora --families gpt --partitions iid,noniid --seeds 100,200,300 --jobs "$jobs" \
                 --no-progress "$@"; }

# 1. Clients send LoRA adapters and their norms (the recipe of docs/peft.md): the seven methods, the clean run
#    (FedAvg, 0%) and the oracle.
sweep --out "$runs"
# 2. Norms frozen, adapters only (the stacks' default): FedAvg, and FedLNS on the experimental LoRA-native
#    signature (signature=lora_stats), with the clean run and the oracle of that payload; a folder of their own,
#    so that the report never mixes the two payloads.
sweep --methods fedavg,fedlns --set peft_norms=false --set signature=lora_stats --out "$runs-frozen"
# 3. The LoRA-native signature on the recipe's payload (LoRA + norms): FedLNS only, its own folder (the report
#    groups runs by method name), to separate the signature from the payload.
sweep --methods fedlns --set signature=lora_stats --no-references --out "$runs-lorastats"
