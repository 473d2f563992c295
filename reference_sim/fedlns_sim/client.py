"""Local training of one client (Algorithm ClientLocalTrain)."""

from __future__ import annotations

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


def train_client(model, global_params: dict[str, np.ndarray], blocks: np.ndarray, config, task: str, tokenizer,
                 attack=None, seed: int = 0, round_index: int = 0, client: int = 0, device: str = "cpu"
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
    trainable = [p for p in model.parameters() if p.requires_grad]   # all of them, except under PEFT
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    data = torch.from_numpy(blocks)
    n_examples, losses = 0, []
    for _ in range(config.local_epochs):
        order = torch.randperm(len(data), generator=generator)
        for start in range(0, len(data), config.batch_size):
            batch = data[order[start:start + config.batch_size]]
            inputs, targets = make_batch(batch, task, tokenizer, config.mlm_probability, generator)
            if attack is not None:
                inputs, targets = attack.apply(inputs, targets, generator)
            loss, _ = lm_loss(model, inputs.to(device), targets.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            n_examples += len(batch)
            losses.append(loss.item())
    return get_params(model), float(n_examples), float(np.mean(losses))
