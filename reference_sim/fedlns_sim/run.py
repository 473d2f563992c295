"""One federated run, top to bottom: data, partition, model, then the round loop.

Files of a run (``<out>/<config.run_name()>/``):

    config.json     the resolved config, plus the data source, model size and malicious set
    rounds.jsonl    one JSON object per round (round 0 = the initial model, before any training)
    state.json      the last completed round and the checkpoint folder that holds its state
    checkpoint-NNNN/global.npz (+ screener state for FedLNS)

Every random draw is a pure function of (seed, round, client): client sampling, batch order, masking, dropout,
the attack and FLAME's noise. So a run killed at any point resumes from its last completed round and ends
with the same numbers as an uninterrupted run; the state to save is just the global weights, the FedLNS
screener and the round counter, written atomically each round.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from .attacks import make_attack
from .client import train_client
from .config import Config
from .data import IGNORE, build_corpus, evaluation_set, resolve_data_dir
from .methods import aggregate_round, make_screener
from .metrics import detection_counts, evaluate, unigram_perplexity
from .models import build_model, count_params, get_params, set_params
from .partitions import choose_malicious, make_partition, sample_clients
from .seeds import stream_seed


def pick_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' requested but torch.cuda.is_available() is False")
    return name


def _atomic_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _save_npz(path: Path, arrays: dict) -> None:
    temporary = path.with_name(path.name + f".tmp{os.getpid()}.npz")
    with open(temporary, "wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _clean(value):
    """JSON-ready: NaN/inf become None, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value


def read_records(run_dir: Path) -> list[dict]:
    """The per-round records of a run (only complete lines)."""
    path = Path(run_dir) / "rounds.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break   # a line cut by a kill; it is recomputed on resume
    return records


def is_finished(run_dir: Path, config: Config) -> bool:
    state = Path(run_dir) / "state.json"
    return state.is_file() and json.loads(state.read_text())["round"] >= config.rounds


def run(config: Config, out: str | Path = "runs", progress: bool = True, stop_after: int | None = None) -> Path:
    """Run (or resume) one simulation; returns its folder. ``stop_after`` ends early after that many rounds
    (used by the tests to simulate a kill)."""
    config = config.validate()
    run_dir = Path(out) / config.run_name()
    run_dir.mkdir(parents=True, exist_ok=True)
    if is_finished(run_dir, config):
        return run_dir
    device = pick_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)

    # ---- data, partition, attack
    data_dir = resolve_data_dir(config.data)
    corpus = build_corpus(config, data_dir, Path(out) / "_cache")
    partition = make_partition(config.partition, len(corpus.train), config.num_clients, config.seed)
    malicious = choose_malicious(config.num_clients, config.num_malicious, config.seed)
    attack = make_attack(config.attack, corpus.tokenizer, config.p_corr)

    # ---- model: the same initial weights for every method of a seed
    torch.manual_seed(config.seed)
    model = build_model(config, corpus.tokenizer.vocab_size).to(device)
    global_params = get_params(model)
    screener = make_screener(config)

    eval_inputs, eval_targets = evaluation_set(corpus.eval, corpus.task, corpus.tokenizer, config.mlm_probability,
                                               config.eval_masks, stream_seed(config.seed, "eval_masks"))

    record = {"config": config.to_dict(), "data_source": corpus.source, "tokenizer": corpus.tokenizer.name,
              "vocab_size": corpus.tokenizer.vocab_size, "n_parameters": count_params(model),
              "train_blocks": int(len(corpus.train)), "eval_blocks": int(len(corpus.eval)),
              "eval_positions": int((eval_targets != IGNORE).sum()),
              "unigram_perplexity": unigram_perplexity(
                  corpus.train, eval_targets.numpy(), corpus.tokenizer.vocab_size,
                  corpus.tokenizer.special_ids if corpus.task == "mlm" else ()),
              "malicious_clients": sorted(malicious), "device": device}
    config_path = run_dir / "config.json"
    if config_path.is_file():
        machine_keys = ("device", "threads", "data")   # may differ between a run and its resume
        stored = json.loads(config_path.read_text())
        previous = {k: v for k, v in stored["config"].items() if k not in machine_keys}
        if previous != {k: v for k, v in config.to_dict().items() if k not in machine_keys}:
            raise RuntimeError(f"{run_dir} holds a run with a different config; use another --out")
        if stored.get("data_source") != corpus.source:
            raise RuntimeError(f"{run_dir} was run on {stored.get('data_source')!r}, now the data is "
                               f"{corpus.source!r}; use another --out")
    else:
        _atomic_write(config_path, json.dumps(record, indent=2).encode())

    # ---- resume
    start = 0
    state_path = run_dir / "state.json"
    if state_path.is_file():
        state = json.loads(state_path.read_text())
        start = state["round"]
        checkpoint = run_dir / state["checkpoint"]
        with np.load(checkpoint / "global.npz") as stored:
            global_params = {k: stored[k] for k in global_params}
        if screener is not None:
            from fedlns_core import FedLNS

            screener = FedLNS.load(checkpoint / "screener")
    records = [r for r in read_records(run_dir) if r["round"] <= start]
    _atomic_write(run_dir / "rounds.jsonl", "".join(json.dumps(r) + "\n" for r in records).encode())
    if not records:   # round 0: the initial model
        set_params(model, global_params)
        metrics = evaluate(model, eval_inputs, eval_targets, config.eval_batch_size, device)
        _append(run_dir, {"round": 0, **metrics})

    # ---- the round loop
    from tqdm.auto import tqdm

    bar = tqdm(range(start, config.rounds), initial=start, total=config.rounds, disable=not progress,
               desc=config.run_name()[:48], leave=False)
    for round_index in bar:
        t = round_index + 1
        sampled = sample_clients(config.num_clients, config.clients_per_round, config.seed, t)

        tic = time.perf_counter()
        client_params, num_examples, train_losses = {}, {}, {}
        for client in sampled:
            client_params[client], num_examples[client], train_losses[client] = train_client(
                model, global_params, corpus.train[partition[client]], config, corpus.task, corpus.tokenizer,
                attack=attack if client in malicious else None, seed=config.seed, round_index=t, client=client,
                device=device)
        client_time = time.perf_counter() - tic

        tic = time.perf_counter()
        outcome = aggregate_round(config, screener, global_params, client_params, num_examples, t)
        server_time = time.perf_counter() - tic
        global_params = outcome.params

        tic = time.perf_counter()
        set_params(model, global_params)
        metrics = evaluate(model, eval_inputs, eval_targets, config.eval_batch_size, device)
        eval_time = time.perf_counter() - tic

        counts = detection_counts(sampled, outcome.kept, malicious) if outcome.decided else {}
        _append(run_dir, {"round": t, **metrics, "sampled": sampled,
                          "malicious_sampled": [c for c in sampled if c in malicious], "kept": outcome.kept,
                          "decided": outcome.decided, "selects_clients": outcome.selects_clients, **counts,
                          "train_loss": float(np.mean(list(train_losses.values()))),
                          "client_time_s": client_time, "server_time_s": server_time, "eval_time_s": eval_time,
                          **outcome.info})
        _save_state(run_dir, t, global_params, screener)
        bar.set_postfix(ppl=f"{metrics['perplexity']:.1f}")
        if stop_after is not None and t >= stop_after:
            break
    bar.close()
    return run_dir


def _append(run_dir: Path, record: dict) -> None:
    with open(run_dir / "rounds.jsonl", "a") as handle:
        handle.write(json.dumps(_clean(record)) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _save_state(run_dir: Path, t: int, global_params: dict, screener) -> None:
    """Write round t's checkpoint folder, then point state.json at it (atomic), then drop older ones."""
    name = f"checkpoint-{t:04d}"
    folder = run_dir / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    _save_npz(folder / "global.npz", global_params)
    if screener is not None:
        screener.save(folder / "screener")
    _atomic_write(run_dir / "state.json", json.dumps({"round": t, "checkpoint": name}).encode())
    for old in run_dir.glob("checkpoint-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
