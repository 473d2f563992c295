"""One federated run, top to bottom: set-up (data, partition, attack, model), the run folder and resume, then
the round loop: the clients train and send, the server steps, the new global model is evaluated, the round is
recorded.

The files of a run (config record, rounds.jsonl, state, checkpoints) are written by ``runfiles``. Every random
draw is a pure function of (seed, stream, round, client) (``seeds``): client sampling, batch order, masking,
dropout, the attack and FLAME's noise. So a run killed at any point resumes from its last completed round and
ends with the same numbers as an uninterrupted run; the state to save is just the global weights, the FedLNS
screener and the round counter, written atomically each round.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from fedlns_core import FedLNS, NormSelector
from fedlns_core._screening import SKETCHING_RULES

from . import finetune, runfiles
from .attacks import Attack, make_attack
from .client import TrainingJob, train_clients, why_not_batched
from .config import Config
from .data import IGNORE, Corpus, build_corpus, evaluation_set, resolve_data_dir
from .methods import RoundOutcome, aggregate_round, make_screener
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


# Instruction-set extensions by which the math libraries under torch (MKL, oneDNN) pick kernels beyond what
# torch's own capability names: two processors with AVX-512 kernels, one with AVX512-FP16 and one without,
# were measured to differ from the first evaluation (docs/simulator.md, "Archive, verify, replay").
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def machine_identity(device: str) -> dict:
    """What decides a run's float rounding besides the code: the processor, the kernels torch picked for it
    (AVX2 and AVX-512 kernels round differently) and the extensions its math libraries may use, torch's version
    and thread count, and the GPU if one ran."""
    model, flags = _cpu()
    identity = {
        "cpu": model,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": flags,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if device == "cuda":
        identity["gpu"] = torch.cuda.get_device_name()
    return identity


def _cpu() -> tuple[str, list[str]]:
    """The processor's model name and the :data:`KERNEL_FLAGS` it has, from one read of Linux's /proc/cpuinfo
    (elsewhere: what ``platform`` says, and no flags)."""
    import platform

    model = ""
    flags: list[str] = []
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    present = set(value.split())
                    flags = [flag for flag in KERNEL_FLAGS if flag in present]
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), flags


@dataclass
class _Federation:
    """What a run sets up once and reads every round."""

    config: Config
    device: str
    corpus: Corpus
    partition: list  # client -> the indices of its training blocks
    malicious: frozenset  # the fixed malicious clients
    attack: Attack
    model: torch.nn.Module  # the working model: clients train in it, the global model is evaluated in it
    norm_keys: frozenset  # what FedLNS sees; adaptive attacks target it
    eval_inputs: torch.Tensor
    eval_targets: torch.Tensor
    batched: bool  # a round's clients train as one batched model (client.py)


@dataclass
class _Server:
    """The server between rounds: what a checkpoint holds (the last completed round, the global weights, the FedLNS
    screener or None), and the round in which each client last sent a model (for the bank-entry ages)."""

    round: int
    global_params: dict
    screener: FedLNS | None
    last_seen: dict


def run(config: Config, out: str | Path = "runs", progress: bool = True, stop_after: int | None = None) -> Path:
    """Run (or resume) one simulation; returns its folder.

    A folder that already holds this run is resumed from its last completed round (a finished one is returned
    as it is); a folder that holds another config, or a run on other data, is refused. Nothing is written
    before the data and the model are ready, so a run that fails to start leaves no folder behind.
    ``stop_after`` ends early after that many rounds (used by the tests to simulate a kill).
    """
    from tqdm.auto import tqdm

    config = config.validate()
    run_dir = Path(out) / config.run_name()
    runfiles.check_same_run(run_dir, config.to_dict())
    if runfiles.is_finished(run_dir, config.rounds):
        return run_dir
    federation = _set_up(config, Path(out))
    _open_folder(run_dir, federation)
    server = _resume(run_dir, federation)
    with tqdm(
        range(server.round + 1, config.rounds + 1),
        initial=server.round,
        total=config.rounds,
        disable=not progress,
        desc=config.run_name()[:48],
        leave=False,
    ) as bar:
        for t in bar:
            sampled = sample_clients(config.num_clients, config.clients_per_round, config.seed, t)
            (sent, num_examples, train_loss), client_time = _timed(_clients_send, federation, server, t, sampled)
            outcome, server_time = _timed(_server_step, federation, server, sent, num_examples, t)
            if server.screener is not None:  # FedLNS's diagnostics: bank-entry ages, the signatures it saw
                outcome.info.update(_bank_ages(server.last_seen, sampled, t))
                if config.record_signatures:
                    _save_signatures(run_dir, t, config, server, sent)
            server.round, server.global_params = t, outcome.params
            metrics, eval_time = _timed(_evaluate, federation, server.global_params)
            times = {"client_time_s": client_time, "server_time_s": server_time, "eval_time_s": eval_time}
            runfiles.append_record(
                run_dir, _record(t, sampled, federation.malicious, metrics, outcome, train_loss, times)
            )
            runfiles.save_state(run_dir, server.round, server.global_params, server.screener)
            bar.set_postfix(ppl=f"{metrics['perplexity']:.1f}")
            if stop_after is not None and t >= stop_after:
                break
    return run_dir


# ------------------------------------------------------------------------------------------ set-up and resume


def _set_up(config: Config, out: Path) -> _Federation:
    """Everything a run reads before its first round: the device, the data and the clients' share of it, the
    malicious set, the attack, the initial model and the evaluation set. Writes nothing but caches under ``out``."""
    device = pick_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    data_dir, cache = resolve_data_dir(config.data), out / "_cache"
    corpus = build_corpus(config, data_dir, cache, tokenizer=finetune.base_tokenizer(config, data_dir, cache))
    partition = make_partition(config.partition, len(corpus.train), config.num_clients, config.seed)
    malicious = choose_malicious(config.num_clients, config.num_malicious, config.seed)
    attack = make_attack(config.attack, corpus.tokenizer, config)
    model = _initial_model(config, corpus.tokenizer, data_dir, cache, device)
    eval_inputs, eval_targets = evaluation_set(
        corpus.eval,
        corpus.task,
        corpus.tokenizer,
        config.mlm_probability,
        config.eval_masks,
        stream_seed(config.seed, "eval_masks"),
    )
    return _Federation(
        config,
        device,
        corpus,
        partition,
        malicious,
        attack,
        model,
        _norm_keys(get_params(model)),
        eval_inputs,
        eval_targets,
        _batched(model, config),
    )


def _initial_model(config: Config, tokenizer, data_dir, cache: Path, device: str) -> torch.nn.Module:
    """The model every method of a seed starts from, on ``device``: built from the seed, or in the fine-tuning
    scenario the (cached) pretrained base model; wrapped when clients train and send a PEFT payload (the server
    then holds the same kind of dict)."""
    torch.manual_seed(config.seed)
    model = build_model(config, tokenizer.vocab_size)
    if config.pretrain_corpus:
        set_params(model, finetune.pretrained_base(config, tokenizer, data_dir, cache, device))
    if config.peft:
        torch.manual_seed(config.seed)
        model = finetune.wrap_peft(model, config)
    return model.to(device)


def _batched(model, config: Config) -> bool:
    """Whether a round's clients train as one batched model (``batch_clients``: ``on``, or ``auto`` where the model
    allows it; ``on`` for a model that does not is refused) or one at a time (client.py)."""
    reason = why_not_batched(model, config)
    if config.batch_clients == "on" and reason:
        raise ValueError(f"batch_clients=on: {reason}; use batch_clients=auto or off")
    return config.batch_clients == "on" or (config.batch_clients == "auto" and reason is None)


def _open_folder(run_dir: Path, federation: _Federation) -> None:
    """Create the run folder (refused if it holds a run on other data) and, unless it has one, its config record:
    the config, the data, the model's size, the unigram reference, the malicious set, the code and the machine."""
    config, corpus, model = federation.config, federation.corpus, federation.model
    runfiles.check_same_run(run_dir, config.to_dict(), corpus.source)
    run_dir.mkdir(parents=True, exist_ok=True)
    if runfiles.read_meta(run_dir) is not None:
        return
    unigram = unigram_perplexity(
        corpus.train,
        federation.eval_targets.numpy(),
        corpus.tokenizer.vocab_size,
        corpus.tokenizer.special_ids if corpus.task == "mlm" else (),
    )
    record = {
        "config": config.to_dict(),
        "data_source": corpus.source,
        "tokenizer": corpus.tokenizer.name,
        "vocab_size": corpus.tokenizer.vocab_size,
        "n_parameters": count_params(model),
        "payload_parameters": int(sum(a.size for a in get_params(model).values())),
        "train_blocks": int(len(corpus.train)),
        "eval_blocks": int(len(corpus.eval)),
        "eval_positions": int((federation.eval_targets != IGNORE).sum()),
        "unigram_perplexity": unigram,
        "malicious_clients": sorted(federation.malicious),
        "device": federation.device,
        "code": runfiles.code_identity(),
        "machine": machine_identity(federation.device),
    }
    runfiles.atomic_write(run_dir / "config.json", json.dumps(runfiles.json_ready(record), indent=2).encode())


def _resume(run_dir: Path, federation: _Federation) -> _Server:
    """The server after the folder's last completed round: the initial model and a fresh screener at round 0, else
    the last checkpoint. Records of later rounds are dropped (they are recomputed); round 0's record, the initial
    model's evaluation, is written if missing."""
    config = federation.config
    start = runfiles.completed_round(run_dir)
    global_params, screener = get_params(federation.model), make_screener(config)
    if start:
        checkpoint = runfiles.checkpoint_dir(run_dir)
        assert checkpoint is not None  # start > 0: state.json exists and names it
        with np.load(checkpoint / "global.npz") as stored:
            global_params = {k: stored[k] for k in global_params}
        if screener is not None:
            screener = FedLNS.load(checkpoint / "screener")
    if not runfiles.keep_records_until(run_dir, start):
        runfiles.append_record(run_dir, {"round": 0, **_evaluate(federation, global_params, attack_metrics=False)})
    last_seen = {}  # replayed from the sampling stream
    for past in range(1, start + 1):
        last_seen.update(
            dict.fromkeys(sample_clients(config.num_clients, config.clients_per_round, config.seed, past), past)
        )
    return _Server(start, global_params, screener, last_seen)


# ------------------------------------------------------------------------------------------ the steps of a round


def _timed(step, *args):
    """``step(*args)`` and the seconds it took."""
    tic = time.perf_counter()
    return step(*args), time.perf_counter() - tic


def _train_round(federation: _Federation, global_params: dict, t: int, sampled: list) -> dict:
    """Round t's local trainings from the global weights: (params, n examples, mean loss) per sampled client. A
    benign client trains once on clean data; an attacker runs the trainings its attack declares
    (``Attack.trainings``) and keeps what the attack's ``local_result`` makes of them."""
    config, corpus, attack, malicious = federation.config, federation.corpus, federation.attack, federation.malicious
    trainings = {c: attack.trainings if c in malicious else ("clean",) for c in sampled}
    jobs = [
        TrainingJob(corpus.train[federation.partition[c]], attack if kind == "poisoned" else None, config.seed, t, c)
        for c in sampled
        for kind in trainings[c]
    ]
    results = train_clients(
        federation.model,
        global_params,
        jobs,
        config,
        corpus.task,
        corpus.tokenizer,
        federation.device,
        federation.batched,
    )
    trained = {}
    for client in sampled:
        own = {kind: next(results) for kind in trainings[client]}
        trained[client] = (
            attack.local_result(own, global_params, federation.norm_keys) if client in malicious else own["clean"]
        )
    return trained


def _clients_send(federation: _Federation, server: _Server, t: int, sampled: list) -> tuple[dict, dict, float]:
    """Round t's client side: the models the sampled clients send and their n examples, each keyed by client, and
    their mean training loss. The attack is told the round, the clients train (:func:`_train_round`), then the
    attack crafts what the round's attackers send; a white-box attack searches against the server's step, run on a
    copy of its state."""
    federation.attack.begin_round(t)
    trained = _train_round(federation, server.global_params, t, sampled)
    client_params = {client: params for client, (params, _, _) in trained.items()}
    num_examples = {client: n for client, (_, n, _) in trained.items()}
    white_box = {"server": _server_view(federation, server, num_examples, t)} if federation.attack.white_box else {}
    sent = federation.attack.craft(
        server.global_params,
        client_params,
        [c for c in sampled if c in federation.malicious],
        federation.norm_keys,
        stream_rng(federation.config.seed, "attack", t),
        **white_box,
    )
    return sent, num_examples, float(np.mean([loss for _, _, loss in trained.values()]))


def _server_step(federation: _Federation, server: _Server, sent: dict, num_examples: dict, t: int) -> RoundOutcome:
    """Round t's server step of the run's method on what the clients sent (FedLNS's screener takes in the round)."""
    return aggregate_round(
        federation.config, server.screener, server.global_params, sent, num_examples, t, federation.malicious
    )


def _server_view(federation: _Federation, server: _Server, num_examples: dict, t: int):
    """Round t's server step as a function ``server(client_params) -> new global params``, run on a copy of the
    server's state each time: what a white-box attack searches against."""
    return lambda sent: (
        _server_step(federation, replace(server, screener=copy.deepcopy(server.screener)), sent, num_examples, t).params
    )


def _bank_ages(last_seen: dict, sampled: list, t: int) -> dict:
    """Round t's diagnostics of the bank's staleness: how old each sampled client's previous entry was, and the
    median and largest entry age once the round's entries are in (``last_seen`` is updated with them)."""
    previous = {str(c): t - last_seen[c] if c in last_seen else None for c in sampled}
    last_seen.update(dict.fromkeys(sampled, t))
    ages = [t - seen for seen in last_seen.values()]
    return {"previous_entry_age": previous, "bank_age": {"median": float(np.median(ages)), "max": int(max(ages))}}


def _evaluate(federation: _Federation, params: dict, attack_metrics: bool = True) -> dict:
    """The global model ``params`` on the evaluation set (loss, perplexity, entropy) and, with ``attack_metrics``,
    the attack's own measurements of it."""
    model, device = federation.model, federation.device
    set_params(model, params)
    metrics = evaluate(
        model, federation.eval_inputs, federation.eval_targets, federation.config.eval_batch_size, device
    )
    if attack_metrics:
        metrics.update(federation.attack.metrics(model, federation.corpus.eval, federation.corpus.task, device))
    return metrics


def _record(
    t: int, sampled: list, malicious, metrics: dict, outcome: RoundOutcome, train_loss: float, times: dict
) -> dict:
    """Round t's line of rounds.jsonl: the evaluation, who was sampled and kept, the detection counts (in a round
    where the method decided), the mean training loss, the time of each phase and the method's diagnostics."""
    counts = detection_counts(sampled, outcome.kept, malicious) if outcome.decided else {}
    return {
        "round": t,
        **metrics,
        "sampled": sampled,
        "malicious_sampled": [c for c in sampled if c in malicious],
        "kept": outcome.kept,
        "decided": outcome.decided,
        "selects_clients": outcome.selects_clients,
        **counts,
        "train_loss": train_loss,
        **times,
        **{k: v for k, v in outcome.info.items() if k != "signature_keys"},
    }


def _norm_keys(params: dict) -> frozenset:
    """The normalization entries of the global model (none in a LoRA payload with frozen norms)."""
    try:
        return frozenset(NormSelector().select(params))
    except ValueError:
        return frozenset()


def _save_signatures(run_dir: Path, t: int, config: Config, server: _Server, client_params: dict) -> None:
    """Each client's flat signature of round t as FedLNS saw it, from the global weights the round started from
    (for offline replay of the screening); for the ``"cohort"`` and ``"support"`` rules also each client's update
    sketch and the round's stamp in the bank (``server.screener`` has taken in the round)."""
    global_params, screener = server.global_params, server.screener
    assert screener is not None  # called for FedLNS runs only
    ids = sorted(client_params)
    keys, signatures = screener.client_signatures(global_params, {c: client_params[c] for c in ids})
    rows = np.stack([signatures[c] for c in ids])  # (n_clients, D) float64
    arrays = {"clients": np.asarray(ids), "signatures": rows, "keys": np.asarray(keys)}
    if screener.retain_rule in SKETCHING_RULES:
        sketches = screener.update_sketches(global_params, client_params)
        arrays.update(sketches=np.stack([sketches[c] for c in ids]), stamp=np.asarray(screener.round_ - 1))
    folder = run_dir / "signatures"
    folder.mkdir(exist_ok=True)
    runfiles.save_npz(folder / f"round-{t:04d}.npz", arrays)
