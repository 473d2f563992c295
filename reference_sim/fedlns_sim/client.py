"""Local training of the clients (Algorithm ClientLocalTrain): one client at a time (``train_client``), or the
clients of a round together as one batched model (``train_clients_batched``, config ``batch_clients``); a round's
trainings go through ``train_clients``, which does either."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .data import IGNORE, causal_targets, mask_for_mlm
from .models import get_params, set_params
from .seeds import stream_seed


def lm_loss(model, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over supervised positions, and the logits: inputs/targets (B, L), logits (B, L, V)."""
    logits = model(input_ids=inputs).logits
    loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)
    return loss, logits


def make_batch(blocks: torch.Tensor, task: str, tokenizer, mlm_probability: float, generator: torch.Generator):
    """(inputs, targets) of a batch of blocks: next-token targets, or BERT masking."""
    if task == "mlm":
        return mask_for_mlm(blocks, tokenizer, mlm_probability, generator)
    return blocks, causal_targets(blocks)


def client_batches(blocks: np.ndarray, config, task: str, tokenizer, attack, generator: torch.Generator):
    """The (inputs, targets) batches of one client's local training, in order, drawn lazily: batch order, MLM
    masking and the attack's rewrite all come from ``generator`` (the client's ``batches`` stream)."""
    data = torch.from_numpy(blocks)
    for _ in range(config.local_epochs):
        order = torch.randperm(len(data), generator=generator)
        for start in range(0, len(data), config.batch_size):
            batch = data[order[start : start + config.batch_size]]
            inputs, targets = make_batch(batch, task, tokenizer, config.mlm_probability, generator)
            if attack is not None:
                inputs, targets = attack.apply(inputs, targets, generator)
            yield inputs, targets


def train_client(
    model,
    global_params: dict[str, np.ndarray],
    blocks: np.ndarray,
    config,
    task: str,
    tokenizer,
    attack=None,
    seed: int = 0,
    round_index: int = 0,
    client: int = 0,
    device: str = "cpu",
) -> tuple[dict[str, np.ndarray], float, float]:
    """Train one client from the global weights; returns (local params, n examples processed, mean loss).

    ``blocks`` is the client's (n_blocks, block_size) data; ``attack``, if given, rewrites every batch. Every
    random choice (batch order, masking, dropout, attack draws) comes from the run ``seed``'s named streams at
    (round, client), so any round can be recomputed exactly.
    n counts training-example occurrences over all local epochs, as in the paper's client algorithm.
    """
    set_params(model, global_params)
    model.train()
    generator = torch.Generator().manual_seed(stream_seed(seed, "batches", round_index, client))
    torch.manual_seed(stream_seed(seed, "dropout", round_index, client))
    trainable = [p for p in model.parameters() if p.requires_grad]  # all of them, except under PEFT
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    n_examples, losses = 0, []
    for inputs, targets in client_batches(blocks, config, task, tokenizer, attack, generator):
        loss, _ = lm_loss(model, inputs.to(device), targets.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        n_examples += len(inputs)
        losses.append(loss.item())
    return get_params(model), float(n_examples), float(np.mean(losses))


def train_clients(
    model,
    global_params: dict[str, np.ndarray],
    jobs: list,
    config,
    task: str,
    tokenizer,
    device: str = "cpu",
    batched: bool = False,
):
    """Train the clients of ``jobs`` (:class:`TrainingJob`); yields what :func:`train_client` returns, per job, in
    order: all together as one batched model (``batched``, :func:`train_clients_batched`), or one at a time, each
    when its result is asked for (so only the results taken so far are held)."""
    if batched:
        yield from train_clients_batched(model, global_params, jobs, config, task, tokenizer, device)
        return
    for job in jobs:
        yield train_client(
            model,
            global_params,
            job.blocks,
            config,
            task,
            tokenizer,
            attack=job.attack,
            seed=job.seed,
            round_index=job.round_index,
            client=job.client,
            device=device,
        )


# ------------------------------------------------------------------------------------------ batched clients


@dataclass(frozen=True)
class TrainingJob:
    """One client's local training in a batched round: its data, the attack's batch rewrite (or None), and
    the (seed, round, client) its random streams are drawn from."""

    blocks: np.ndarray
    attack: object
    seed: int
    round_index: int
    client: int


def why_not_batched(model, config) -> str | None:
    """Why this model's clients cannot be trained as one batched model with the sequential numbers (None: they
    can). Dropout is the obstacle: a batched model draws every client's masks from one stream, so the numbers
    would differ from one client at a time, not only by rounding."""
    if config.peft:
        return "PEFT payloads are trained one client at a time"
    rates = {round(float(m.p), 6) for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0}
    rates |= {float(getattr(model.config, "attention_dropout", 0.0) or 0.0)} - {0.0}
    if rates:
        return f"the model has dropout ({', '.join(map(str, sorted(rates)))})"
    return None


def train_clients_batched(
    model,
    global_params: dict[str, np.ndarray],
    jobs: list[TrainingJob],
    config,
    task: str,
    tokenizer,
    device: str = "cpu",
) -> list[tuple[dict[str, np.ndarray], float, float]]:
    """Train the clients of ``jobs`` together; returns what :func:`train_client` returns, per job, in order.

    Every client's parameters are one slice of stacked tensors (K, ...) and the model runs once per step over
    all of them (``torch.func.vmap`` of ``functional_call``). Each client sees exactly the batches
    :func:`train_client` would draw (same streams, same order); a client whose last batch is smaller, or whose
    data runs out before the others' (non-IID), is padded with positions that carry no target and is not
    stepped once its data is used up. AdamW is written out over the stacked tensors: it is coordinate-wise, so
    on slice k it is client k's own AdamW (every client still training has made the same number of steps).
    The numbers equal one client at a time up to float rounding (``tests/test_sim_batched.py``); the model
    must have no dropout (:func:`why_not_batched`). Attention runs in eager mode during the batched steps
    (scaled-dot-product attention under ``vmap`` did not give the per-client logits here).
    """
    from torch.func import functional_call, vmap

    reason = why_not_batched(model, config)
    if reason:
        raise ValueError(f"batch_clients: {reason}; train one client at a time (batch_clients=off)")
    set_params(model, global_params)
    model.train()
    batches = []
    for job in jobs:
        generator = torch.Generator().manual_seed(stream_seed(job.seed, "batches", job.round_index, job.client))
        batches.append(list(client_batches(job.blocks, config, task, tokenizer, job.attack, generator)))
    order = sorted(range(len(jobs)), key=lambda k: -len(batches[k]))  # still training: always a prefix
    batches = [batches[k] for k in order]
    n_jobs = len(jobs)
    named = dict(model.named_parameters())
    stacked = {
        name: p.detach().to(device).unsqueeze(0).repeat(n_jobs, *([1] * p.dim())).requires_grad_(True)
        for name, p in named.items()
    }
    buffers = dict(model.named_buffers())
    first_moment = {name: torch.zeros_like(p) for name, p in stacked.items()}
    second_moment = {name: torch.zeros_like(p) for name, p in stacked.items()}
    beta1, beta2 = 0.9, 0.999  # torch.optim.AdamW's defaults, as train_client uses
    lr, weight_decay, eps = config.learning_rate, config.weight_decay, 1e-8

    def logits_of(params, inputs):
        return functional_call(model, (params, buffers), (inputs,)).logits

    batched_logits = vmap(logits_of)
    n_examples = [0] * n_jobs
    losses: list[list[float]] = [[] for _ in range(n_jobs)]
    attention = model.config._attn_implementation
    model.config._attn_implementation = "eager"
    try:
        for step in range(len(batches[0]) if batches else 0):
            active = sum(1 for client_batches_ in batches if step < len(client_batches_))
            rows = max(len(batches[k][step][0]) for k in range(active))
            length = batches[0][step][0].shape[1]
            inputs = torch.zeros((active, rows, length), dtype=batches[0][step][0].dtype)
            targets = torch.full((active, rows, length), IGNORE, dtype=batches[0][step][1].dtype)
            for k in range(active):
                batch_inputs, batch_targets = batches[k][step]
                inputs[k, : len(batch_inputs)] = batch_inputs
                targets[k, : len(batch_targets)] = batch_targets
                n_examples[k] += len(batch_inputs)
            inputs, targets = inputs.to(device), targets.to(device)
            logits = batched_logits({name: p[:active] for name, p in stacked.items()}, inputs)
            entropy = F.cross_entropy(
                logits.flatten(0, 2).float(), targets.flatten(), ignore_index=IGNORE, reduction="none"
            ).view(active, -1)
            per_client = entropy.sum(dim=1) / (targets != IGNORE).view(active, -1).sum(dim=1)
            per_client.sum().backward()
            with torch.no_grad():
                count = step + 1
                step_size = lr / (1 - beta1**count)
                root = (1 - beta2**count) ** 0.5
                for name, p in stacked.items():
                    param, grad = p.data[:active], p.grad[:active]
                    m, v = first_moment[name][:active], second_moment[name][:active]
                    param.mul_(1 - lr * weight_decay)
                    m.lerp_(grad, 1 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    param.addcdiv_(m, (v.sqrt() / root).add_(eps), value=-step_size)
                    p.grad = None
            for k, value in enumerate(per_client.tolist()):
                losses[k].append(value)
    finally:
        model.config._attn_implementation = attention
    results: dict[int, tuple[dict[str, np.ndarray], float, float]] = {}  # job -> its result
    for position, k in enumerate(order):
        params = {name: p[position].detach().cpu().numpy().copy() for name, p in stacked.items()}
        results[k] = (params, float(n_examples[position]), float(np.mean(losses[position])))
    return [results[k] for k in range(n_jobs)]  # order is a permutation of the jobs: each filled once
