"""Client training of one round, one client at a time against the round's clients as one batched model.

Run: ``python benchmarks/bench_batched.py`` (``--preset``, ``--families``, ``--repeats``, ``--device``,
``--no-dropout``; data from ``$FEDLNS_DATA`` or ``../shared/data``). Prints a markdown table.

The round is round 1 of seed 100 at 40% malicious: its sampled clients, their data, the attack on the
attackers' batches, exactly what ``fedlns_sim.run`` trains. The two ways alternate (sequential, batched,
sequential, ...) so both see the same machine state; the first pass of each is a warm-up and is not timed.
A family whose config has dropout (BERT; GPT in the ``paper`` preset) cannot be batched with the sequential
numbers: its round is timed one client at a time only. ``--no-dropout`` adds a row for GPT with dropout 0 (the
config's ``dropout`` is GPT's alone; not the preset's setting: the row says what batching would save, not what a
run does).
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


def one_round(preset: str, family: str, device: str, **overrides):
    config = make_config(preset, family, malicious_fraction=0.4, seed=100, device=device, **overrides)
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
    parser.add_argument("--no-dropout", action="store_true",
                        help="add a row for GPT with dropout 0 where its preset has dropout (timing only)")
    args = parser.parse_args(argv)
    print(f"Preset {args.preset}, device {args.device}, torch {torch.__version__} ({torch.get_num_threads()} "
          f"threads), {platform.processor() or platform.machine()}; best (median) of {args.repeats}.\n")
    print("| family | clients | steps per client | sequential (s) | batched (s) | speed-up (best) |")
    print("|---|---:|---:|---:|---:|---:|")
    for family in args.families.split(","):
        row, reason = _row(args, family, {})
        print(row, flush=True)
        if args.no_dropout and family == "gpt" and reason:  # the config's dropout is GPT's alone
            print(_row(args, family, {"dropout": 0.0})[0], flush=True)
    return 0


def _row(args, family: str, overrides: dict) -> tuple[str, str | None]:
    """One table row (and why the clients were not batched, if not): the round's clients trained one at a time
    and, where the model allows, as one batch."""
    config, corpus, model, jobs = one_round(args.preset, family, args.device, **overrides)
    label = family + "".join(f" ({key} {value})" for key, value in overrides.items())
    steps = config.local_epochs * int(np.ceil(np.mean([len(j.blocks) for j in jobs]) / config.batch_size))
    global_params = get_params(model)

    def sequential():
        return [train_client(model, global_params, j.blocks, config, corpus.task, corpus.tokenizer,
                             attack=j.attack, seed=j.seed, round_index=j.round_index, client=j.client,
                             device=args.device) for j in jobs]

    def batched():
        return train_clients_batched(model, global_params, jobs, config, corpus.task, corpus.tokenizer, args.device)

    reason = why_not_batched(model, config)
    ways = {"sequential": sequential} if reason else {"sequential": sequential, "batched": batched}
    times = {name: [] for name in ways}
    for repeat in range(args.repeats + 1):
        for name, function in ways.items():
            start = time.perf_counter()
            function()
            if args.device == "cuda":
                torch.cuda.synchronize()
            if repeat:
                times[name].append(time.perf_counter() - start)
    seq = times["sequential"]
    cells = f"| {label} | {len(jobs)} | {steps} | {min(seq):.2f} ({np.median(seq):.2f}) |"
    if reason:
        return f"{cells} not batched: {reason} | |", reason
    bat = times["batched"]
    return f"{cells} {min(bat):.2f} ({np.median(bat):.2f}) | {min(seq) / min(bat):.2f}x |", None


if __name__ == "__main__":
    raise SystemExit(main())
