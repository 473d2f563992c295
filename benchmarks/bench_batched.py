"""Client training of one round, one client at a time against the round's clients as one batched model.

Run: ``python benchmarks/bench_batched.py`` (``--preset``, ``--families``, ``--repeats``, ``--device``; data from
``$FEDLNS_DATA`` or ``../shared/data``). Prints a markdown table.

The round is round 1 of seed 100 at 40% malicious: its sampled clients, their data, the attack on the
attackers' batches, exactly what ``fedlns_sim.run`` trains. The two ways alternate (sequential, batched,
sequential, ...) so both see the same machine state; the first pass of each is a warm-up and is not timed.
BERT keeps its config's dropout, so its clients cannot be batched with the sequential numbers: it is listed
as such.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import torch

from fedlns_sim.attacks import make_attack
from fedlns_sim.client import TrainingJob, train_client, train_clients_batched, why_not_batched
from fedlns_sim.config import make_config
from fedlns_sim.data import build_corpus, resolve_data_dir
from fedlns_sim.models import build_model, get_params
from fedlns_sim.partitions import choose_malicious, make_partition, sample_clients


def one_round(preset: str, family: str, device: str):
    config = make_config(preset, family, malicious_fraction=0.4, seed=100, device=device)
    data_dir = resolve_data_dir(config.data)
    corpus = build_corpus(config, data_dir, Path("runs") / "_cache")
    partition = make_partition(config.partition, len(corpus.train), config.num_clients, config.seed)
    malicious = choose_malicious(config.num_clients, config.num_malicious, config.seed)
    attack = make_attack(config.attack, corpus.tokenizer, config)
    torch.manual_seed(config.seed)
    model = build_model(config, corpus.tokenizer.vocab_size).to(device)
    jobs = [TrainingJob(corpus.train[partition[c]], attack if c in malicious else None, config.seed, 1, c)
            for c in sample_clients(config.num_clients, config.clients_per_round, config.seed, 1)]
    return config, corpus, model, jobs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--families", default="gpt,llama,bert")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes of each way (default 3)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    print(f"Preset {args.preset}, device {args.device}, torch {torch.__version__} ({torch.get_num_threads()} "
          f"threads), {platform.processor() or platform.machine()}; best (median) of {args.repeats}.\n")
    print("| family | clients | steps per client | sequential (s) | batched (s) | speed-up (best) |")
    print("|---|---:|---:|---:|---:|---:|")
    for family in args.families.split(","):
        config, corpus, model, jobs = one_round(args.preset, family, args.device)
        steps = config.local_epochs * int(np.ceil(np.mean([len(j.blocks) for j in jobs]) / config.batch_size))
        reason = why_not_batched(model, config)
        if reason:
            print(f"| {family} | {len(jobs)} | {steps} | | not batched: {reason} | |")
            continue
        global_params = get_params(model)

        def sequential():
            return [train_client(model, global_params, j.blocks, config, corpus.task, corpus.tokenizer,
                                 attack=j.attack, seed=j.seed, round_index=j.round_index, client=j.client,
                                 device=args.device) for j in jobs]

        def batched():
            return train_clients_batched(model, global_params, jobs, config, corpus.task, corpus.tokenizer,
                                         args.device)

        times = {"sequential": [], "batched": []}
        for repeat in range(args.repeats + 1):
            for name, function in (("sequential", sequential), ("batched", batched)):
                start = time.perf_counter()
                function()
                if args.device == "cuda":
                    torch.cuda.synchronize()
                if repeat:
                    times[name].append(time.perf_counter() - start)
        seq, bat = times["sequential"], times["batched"]
        print(f"| {family} | {len(jobs)} | {steps} | {min(seq):.2f} ({np.median(seq):.2f}) | "
              f"{min(bat):.2f} ({np.median(bat):.2f}) | {min(seq) / min(bat):.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
