"""Pluggable client attacks. An attack sees one batch of a malicious client and returns new (inputs, targets).

To add one: subclass ``Attack``, implement ``apply``, and register it in ``ATTACKS``.
"""

from __future__ import annotations

import torch

from .data import IGNORE, Tokenizer, valid_target_ids


class Attack:
    """Interface: ``apply(inputs, targets, generator) -> (inputs, targets)``; must not modify its arguments."""

    def __init__(self, tokenizer: Tokenizer, **params):
        self.tokenizer = tokenizer
        self.params = params

    def apply(self, inputs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator
              ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class TargetCorruption(Attack):
    """The paper's attack: inputs unchanged; each supervised target (``targets != IGNORE``; for MLM these are only
    the masked positions) is replaced with probability ``p_corr`` by a uniformly random valid token, never a
    padding, EOS or other special token."""

    def __init__(self, tokenizer: Tokenizer, p_corr: float = 1.0):
        super().__init__(tokenizer, p_corr=p_corr)
        self.p_corr = p_corr
        self.candidates = valid_target_ids(tokenizer)   # (n_valid,)

    def apply(self, inputs, targets, generator):
        supervised = targets != IGNORE
        replace = supervised & (torch.rand(targets.shape, generator=generator) < self.p_corr)
        random_tokens = self.candidates[torch.randint(len(self.candidates), targets.shape, generator=generator)]
        return inputs, torch.where(replace, random_tokens, targets)


ATTACKS = {"target_corruption": TargetCorruption}


def make_attack(name: str, tokenizer: Tokenizer, p_corr: float = 1.0) -> Attack:
    """Build a registered attack by name."""
    if name not in ATTACKS:
        raise KeyError(f"unknown attack {name!r}; registered: {sorted(ATTACKS)}")
    return ATTACKS[name](tokenizer, p_corr=p_corr)
