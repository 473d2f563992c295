"""Evaluation of a model (loss, perplexity, token-level entropy), the unigram reference, detection counts.

Statistics over run records (best checkpoint, rates) are in ``stats``, which needs no torch."""

from __future__ import annotations

import math

import numpy as np
import torch

from .data import IGNORE


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Predictive entropy in nats per position: (..., V) -> (...).

    Examples
    --------
    >>> round(float(token_entropy(torch.zeros(1, 50))[0]), 6) == round(math.log(50), 6)
    True
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


def perplexity(loss: float) -> float:
    """exp(mean cross-entropy); inf when it overflows."""
    return math.exp(loss) if loss < 700 else float("inf")


@torch.no_grad()
def evaluate(model, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int, device: str = "cpu") -> dict:
    """Loss, perplexity and mean entropy over all supervised positions (masked ones only for MLM)."""
    model.eval()
    total_loss, total_entropy, count = 0.0, 0.0, 0
    for start in range(0, len(inputs), batch_size):
        x = inputs[start : start + batch_size].to(device)
        y = targets[start : start + batch_size].to(device)
        logits = model(input_ids=x).logits
        keep = y != IGNORE
        picked = logits[keep].float()  # (n_positions, V)
        total_loss += torch.nn.functional.cross_entropy(picked, y[keep], reduction="sum").item()
        total_entropy += token_entropy(picked).sum().item()
        count += int(keep.sum())
    loss = total_loss / max(count, 1)
    return {
        "eval_loss": loss,
        "perplexity": perplexity(loss),
        "entropy": total_entropy / max(count, 1),
        "eval_positions": count,
    }


def unigram_perplexity(train_blocks: np.ndarray, targets: np.ndarray, vocab_size: int, special_ids=()) -> float:
    """Perplexity of an add-one smoothed unigram model fitted on the training blocks, on the evaluation targets.

    The floor any trained model must beat: it knows token frequencies and nothing else. Counts cover the
    training tokens except ``special_ids`` (pass the tokens that are never targets, e.g. BERT's [CLS]/[SEP]),
    plus one for every id; the evaluation positions are the supervised ones (``targets != IGNORE``).

    Examples
    --------
    >>> # counts 2+1 and 1+1: p = (0.6, 0.4); targets 0 and 1 give 1 / sqrt(0.6 * 0.4)
    >>> round(unigram_perplexity(np.array([[0, 0, 1]]), np.array([[0, 1, IGNORE]]), vocab_size=2), 4)
    2.0412
    """
    tokens = np.asarray(train_blocks).ravel()
    tokens = tokens[~np.isin(tokens, list(special_ids))]
    counts = np.bincount(tokens, minlength=vocab_size)[:vocab_size] + 1.0
    probabilities = counts / counts.sum()
    picked = np.asarray(targets).ravel()
    picked = picked[picked != IGNORE]
    return float(np.exp(-np.mean(np.log(probabilities[picked]))))


def detection_counts(sampled, kept, malicious) -> dict:
    """Confusion counts of one round, "positive" = rejected: tp = rejected malicious, fp = rejected benign."""
    sampled, kept = set(sampled), set(kept)
    rejected = sampled - kept
    bad = sampled & set(malicious)
    return {"tp": len(rejected & bad), "fp": len(rejected - bad), "fn": len(kept & bad), "tn": len(kept - bad)}
