"""One federated run, top to bottom: data, partition, model, then the round loop.

The files of a run (config record, rounds.jsonl, state, checkpoints) are written by ``runfiles``. Every random
draw is a pure function of (seed, stream, round, client) (``seeds``): client sampling, batch order, masking,
dropout, the attack and FLAME's noise. So a run killed at any point resumes from its last completed round and
ends with the same numbers as an uninterrupted run; the state to save is just the global weights, the FedLNS
screener and the round counter, written atomically each round.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from fedlns_core import NormSelector
from fedlns_core.experimental import lora_signature

from . import finetune, runfiles
from .attacks import make_attack
from .client import TrainingJob, train_clients, why_not_batched
from .config import Config
from .data import IGNORE, build_corpus, evaluation_set, resolve_data_dir
from .methods import aggregate_round, make_screener
from .metrics import detection_counts, evaluate, unigram_perplexity
from .models import build_model, count_params, get_params, set_params
from .partitions import choose_malicious, make_partition, sample_clients
from .seeds import stream_rng, stream_seed


def pick_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' requested but torch.cuda.is_available() is False")
    return name


def machine_identity(device: str) -> dict:
    """What decides a run's float rounding besides the code: the processor and the kernels torch picked for it
    (AVX2 and AVX-512 kernels round differently), torch's version and thread count, and the GPU if one ran."""
    identity = {"cpu": _cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "torch": torch.__version__, "threads": torch.get_num_threads()}
    if device == "cuda":
        identity["gpu"] = torch.cuda.get_device_name()
    return identity


def _cpu_model() -> str:
    import platform

    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(config: Config, out: str | Path = "runs", progress: bool = True, stop_after: int | None = None) -> Path:
    """Run (or resume) one simulation; returns its folder.

    A folder that already holds this run is resumed from its last completed round (a finished one is returned
    as it is); a folder that holds another config, or a run on other data, is refused. Nothing is written
    before the data and the model are ready, so a run that fails to start leaves no folder behind.
    ``stop_after`` ends early after that many rounds (used by the tests to simulate a kill).
    """
    config = config.validate()
    run_dir = Path(out) / config.run_name()
    runfiles.check_same_run(run_dir, config.to_dict())
    if runfiles.is_finished(run_dir, config.rounds):
        return run_dir
    device = pick_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)

    # ---- data, partition, attack
    data_dir = resolve_data_dir(config.data)
    cache = Path(out) / "_cache"
    corpus = build_corpus(config, data_dir, cache, tokenizer=finetune.base_tokenizer(config, data_dir, cache))
    partition = make_partition(config.partition, len(corpus.train), config.num_clients, config.seed)
    malicious = choose_malicious(config.num_clients, config.num_malicious, config.seed)
    attack = make_attack(config.attack, corpus.tokenizer, config)

    # ---- model: the same initial weights for every method of a seed
    torch.manual_seed(config.seed)
    model = build_model(config, corpus.tokenizer.vocab_size)
    if config.pretrain_corpus:   # the fine-tuning scenario: start from the (cached) pretrained base model
        set_params(model, finetune.pretrained_base(config, corpus.tokenizer, data_dir, cache, device))
    if config.peft:              # clients train and send a PEFT payload; the server holds the same kind of dict
        torch.manual_seed(config.seed)
        model = finetune.wrap_peft(model, config)
    model = model.to(device)
    global_params = get_params(model)
    norm_keys = _norm_keys(global_params)   # what FedLNS sees; adaptive attacks target it
    screener = make_screener(config)
    eval_inputs, eval_targets = evaluation_set(corpus.eval, corpus.task, corpus.tokenizer, config.mlm_probability,
                                               config.eval_masks, stream_seed(config.seed, "eval_masks"))

    # ---- the run folder: created only now that everything needed has loaded
    runfiles.check_same_run(run_dir, config.to_dict(), corpus.source)
    run_dir.mkdir(parents=True, exist_ok=True)
    if runfiles.read_meta(run_dir) is None:
        unigram = unigram_perplexity(corpus.train, eval_targets.numpy(), corpus.tokenizer.vocab_size,
                                     corpus.tokenizer.special_ids if corpus.task == "mlm" else ())
        record = {"config": config.to_dict(), "data_source": corpus.source, "tokenizer": corpus.tokenizer.name,
                  "vocab_size": corpus.tokenizer.vocab_size, "n_parameters": count_params(model),
                  "payload_parameters": int(sum(a.size for a in global_params.values())),
                  "train_blocks": int(len(corpus.train)), "eval_blocks": int(len(corpus.eval)),
                  "eval_positions": int((eval_targets != IGNORE).sum()), "unigram_perplexity": unigram,
                  "malicious_clients": sorted(malicious), "device": device, "code": runfiles.code_identity(),
                  "machine": machine_identity(device)}
        runfiles.atomic_write(run_dir / "config.json", json.dumps(runfiles.json_ready(record), indent=2).encode())

    # ---- resume
    start = runfiles.completed_round(run_dir)
    if start:
        checkpoint = runfiles.checkpoint_dir(run_dir)
        with np.load(checkpoint / "global.npz") as stored:
            global_params = {k: stored[k] for k in global_params}
        if screener is not None:
            from fedlns_core import FedLNS

            screener = FedLNS.load(checkpoint / "screener")
    if not runfiles.keep_records_until(run_dir, start):   # round 0: the initial model
        set_params(model, global_params)
        runfiles.append_record(run_dir, {"round": 0, **evaluate(model, eval_inputs, eval_targets,
                                                                 config.eval_batch_size, device)})
    # when each client last sent a model (replayed from the sampling stream on resume): bank-entry ages
    last_seen = {}
    for past in range(1, start + 1):
        last_seen.update({client: past for client in sample_clients(config.num_clients, config.clients_per_round,
                                                                    config.seed, past)})

    # ---- how clients train: one at a time, or a round's clients as one batched model (client.py)
    reason = why_not_batched(model, config)
    if config.batch_clients == "on" and reason:
        raise ValueError(f"batch_clients=on: {reason}; use batch_clients=auto or off")
    batched = config.batch_clients == "on" or (config.batch_clients == "auto" and reason is None)

    # ---- the round loop
    from tqdm.auto import tqdm

    bar = tqdm(range(start, config.rounds), initial=start, total=config.rounds, disable=not progress,
               desc=config.run_name()[:48], leave=False)
    for round_index in bar:
        t = round_index + 1
        sampled = sample_clients(config.num_clients, config.clients_per_round, config.seed, t)

        # clients train from the global weights; the attack decides how malicious ones train, then what they send
        tic = time.perf_counter()
        client_params, num_examples, train_losses = {}, {}, {}
        trainings = {c: attack.trainings if c in malicious else ("clean",) for c in sampled}
        jobs = [TrainingJob(corpus.train[partition[c]], attack if kind == "poisoned" else None, config.seed, t, c)
                for c in sampled for kind in trainings[c]]
        results = train_clients(model, global_params, jobs, config, corpus.task, corpus.tokenizer, device, batched)
        for client in sampled:
            own = {kind: next(results) for kind in trainings[client]}
            trained = attack.local_result(own, global_params, norm_keys) if client in malicious else own["clean"]
            client_params[client], num_examples[client], train_losses[client] = trained
        white_box = ({"server": _server_view(config, screener, global_params, num_examples, t, malicious)}
                     if attack.white_box else {})
        client_params = attack.craft(global_params, client_params, [c for c in sampled if c in malicious],
                                     norm_keys, stream_rng(config.seed, "attack", t), **white_box)
        client_time = time.perf_counter() - tic

        # the server step of the method
        tic = time.perf_counter()
        outcome = aggregate_round(config, screener, global_params, client_params, num_examples, t, malicious)
        server_time = time.perf_counter() - tic

        if screener is not None:   # diagnostics: how stale each client's previous bank entry was
            outcome.info["previous_entry_age"] = {str(c): t - last_seen[c] if c in last_seen else None
                                                  for c in sampled}
            last_seen.update({client: t for client in sampled})
            ages = [t - seen for seen in last_seen.values()]
            outcome.info["bank_age"] = {"median": float(np.median(ages)), "max": int(max(ages))}
            if config.record_signatures:
                seen = (lora_signature(global_params, client_params)
                        if config.signature == "lora_stats" else (global_params, client_params))
                _save_signatures(run_dir, t, *seen, outcome.info["signature_keys"], screener)
        global_params = outcome.params

        # evaluation of the new global model
        tic = time.perf_counter()
        set_params(model, global_params)
        metrics = evaluate(model, eval_inputs, eval_targets, config.eval_batch_size, device)
        metrics.update(attack.metrics(model, corpus.eval, corpus.task, device))
        eval_time = time.perf_counter() - tic

        counts = detection_counts(sampled, outcome.kept, malicious) if outcome.decided else {}
        runfiles.append_record(run_dir, {
            "round": t, **metrics, "sampled": sampled, "malicious_sampled": [c for c in sampled if c in malicious],
            "kept": outcome.kept, "decided": outcome.decided, "selects_clients": outcome.selects_clients, **counts,
            "train_loss": float(np.mean(list(train_losses.values()))), "client_time_s": client_time,
            "server_time_s": server_time, "eval_time_s": eval_time,
            **{k: v for k, v in outcome.info.items() if k != "signature_keys"}})
        runfiles.save_state(run_dir, t, global_params, screener)
        bar.set_postfix(ppl=f"{metrics['perplexity']:.1f}")
        if stop_after is not None and t >= stop_after:
            break
    bar.close()
    return run_dir


def _server_view(config, screener, global_params, num_examples, t, malicious):
    """The round's server step on a copy of the server's state: what a white-box attacker searches against."""
    import copy

    def server(client_params):
        probe = copy.deepcopy(screener)
        return aggregate_round(config, probe, global_params, client_params, num_examples, t, malicious).params
    return server


def _norm_keys(params: dict) -> frozenset:
    """The normalization entries of the global model (none in a LoRA payload with frozen norms)."""
    try:
        return frozenset(NormSelector().select(params))
    except ValueError:
        return frozenset()


def _save_signatures(run_dir: Path, t: int, global_params: dict, client_params: dict, keys, screener) -> None:
    """Each client's flat normalization signature of round t (for offline replay of the screening); for the
    ``"support"`` rule also each client's update sketch and the round's stamp in the bank."""
    from fedlns_core import extract_signature

    ids = sorted(client_params)
    rows = np.stack([np.concatenate([part.ravel() for part in
                                     extract_signature(global_params, client_params[c], keys).values()])
                     for c in ids])   # (n_clients, D) float64
    arrays = {"clients": np.asarray(ids), "signatures": rows, "keys": np.asarray(keys)}
    if screener.retain_rule == "support":
        sketches = screener.update_sketches(global_params, client_params)
        arrays.update(sketches=np.stack([sketches[c] for c in ids]), stamp=np.asarray(screener.round_ - 1))
    folder = run_dir / "signatures"
    folder.mkdir(exist_ok=True)
    runfiles.save_npz(folder / f"round-{t:04d}.npz", arrays)
