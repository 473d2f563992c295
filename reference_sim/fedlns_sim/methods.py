"""Server-side aggregation methods: the six baselines, FedLNS alone and in front of a full-update rule, and the
oracle reference, behind one call per round.

FedAvg, the oracle and FedLNS average with ``fedlns_core.weighted_average`` (through
``ScreeningResult.aggregate`` for FedLNS), and every update is applied with ``fedlns_core.apply_update`` (through
``ScreeningResult.aggregate`` when FedLNS screens in front of a baseline), so every experiment also exercises the
library users install.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedlns_core import apply_update, weighted_average

from .baselines import client_updates, make_aggregator, paper_parameters
from .config import COMPOSED
from .seeds import stream_key, stream_seed


@dataclass
class RoundOutcome:
    """What the server did in one round."""

    params: dict[str, np.ndarray]  # the new global weights
    kept: list  # client ids whose updates entered the aggregate
    decided: bool  # False when the method made no keep/reject decision (FedLNS warming up)
    selects_clients: bool  # True for methods that pick clients (detection rates are meaningful)
    info: dict  # method diagnostics, JSON-ready


#: The simulator's ``signature`` setting and the core's ``FedLNS(signature=...)`` it stands for (the simulator's
#: names predate the core's and name archived runs).
SIGNATURES = {"norms": "norm", "lora_stats": "lora", "auto": "auto"}


def make_screener(config):
    """The FedLNS screener of a run (None for the other methods)."""
    if not config.method.startswith("fedlns"):
        return None
    from fedlns_core import FedLNS, rule_for_round_size

    signature = SIGNATURES[config.signature]
    seed = stream_seed(config.seed, "screening")
    if config.method in ("fedlns_default", "fedlns_support"):  # FedLNS's default, planned from the population size
        support = config.method == "fedlns_support" or config.default_rule == "support"  # the default before cohort
        return FedLNS.for_federation(
            config.num_clients,
            config.clients_per_round,
            signature=signature,
            random_state=seed,
            cohort_undecided=config.cohort_undecided,
            cohort_cut=config.cohort_cut,
            cohort_vote=config.cohort_vote,
            cohort_weight=config.cohort_weight,
            cohort_margin=config.cohort_margin,
            cohort_balance=config.cohort_balance,
            cohort_contested=config.cohort_contested,
            cohort_strong_minority=config.cohort_strong_minority,
            cohort_open=config.cohort_open,
            quorum=config.quorum,
            clip=None if config.default_clip == "none" else "median",
            warmup=config.default_warmup,
            **({"retain_rule": "support"} if support else {}),
        )
    settings = dict(
        signature=signature,
        activation_threshold=config.activation_threshold,
        components="two" if config.method == "fedlns_two" else "bic",
        mixture_solver=config.mixture_solver,
        warmup=config.warmup,
        random_state=seed,
    )
    if config.retain_rule == "for_federation":  # the paper-family rule measured best for this round size
        settings.update(rule_for_round_size(config.clients_per_round))
    return FedLNS.paper(**settings)


def baseline_parameters(config, method: str | None = None, n_clients: int | None = None) -> dict:
    """Keyword parameters of a baseline (``method``, default the config's) for rounds of ``n_clients`` (default
    the config's clients per round); Trimmed Mean and Multi-Krum follow tab:app_robust_agg_params."""
    method = method or config.method
    paper = paper_parameters(config.malicious_fraction, n_clients or config.clients_per_round)
    if method == "trimmed_mean":
        return {
            "trim_fraction": paper["trimmed_mean"]["trim_fraction"]
            if config.trim_fraction < 0
            else config.trim_fraction
        }
    if method == "multi_krum":
        f = paper["multi_krum"]["f"] if config.krum_f < 0 else config.krum_f
        m = paper["multi_krum"]["m"] if config.krum_m < 0 else config.krum_m
        return {"f": f, "m": m}
    if method == "norm_bounded_fedavg":
        return {"bound": config.norm_bound} if config.norm_bound > 0 else {}
    if method == "flame":
        return {"noise_scale": config.flame_noise}
    return {}


def _fedavg(global_params, client_params: dict, num_examples: dict) -> dict:
    total = sum(num_examples.values())
    return weighted_average(global_params, client_params, {c: n / total for c, n in num_examples.items()})


def aggregate_round(
    config, screener, global_params, client_params: dict, num_examples: dict, round_index: int, malicious=frozenset()
) -> RoundOutcome:
    """One server step of ``config.method`` on the round's local models (dicts keyed by client id).

    ``malicious`` (the ground truth) is read by the ``oracle`` reference only: FedAvg over the round's benign
    clients, the ceiling of any screening defence.
    """
    if screener is not None:
        result = screener.screen(global_params, client_params, num_examples)
        info = {
            "active": bool(result.active),
            "bank_size": int(result.bank_size),
            "n_components": result.n_components,
            "rejected_reasons": {str(k): v for k, v in result.rejected.items()},
            "signature_keys": list(result.signature_keys),
        }
        if result.held:  # the quorum held the round (FedLNS(quorum=...)); absent otherwise, as in every older run
            info["held"] = True
        if result.scores:  # active rounds: every client's delta and label, both BIC values
            info.update(
                delta={str(k): v for k, v in result.scores.items()},
                label={str(k): v for k, v in (result.labels or {}).items()},
                bic={str(c): v for c, v in (result.bic or {}).items()},
            )
        aggregator = None
        if config.method in COMPOSED and result.retained:  # defence in depth: a full-update rule on the retained
            aggregator = make_aggregator(
                COMPOSED[config.method], **baseline_parameters(config, COMPOSED[config.method], len(result.retained))
            )
        return RoundOutcome(
            result.aggregate(global_params, client_params, aggregator),
            list(result.retained),
            bool(result.active),
            True,
            info,
        )
    if config.method in ("fedavg", "oracle"):
        kept = [c for c in client_params if config.method == "fedavg" or c not in malicious]
        if not kept:  # a round of attackers only: the oracle keeps the global model
            return RoundOutcome(
                {k: np.array(v, copy=True) for k, v in global_params.items()}, [], True, config.method == "oracle", {}
            )
        params = _fedavg(global_params, {c: client_params[c] for c in kept}, {c: num_examples[c] for c in kept})
        return RoundOutcome(params, kept, True, config.method == "oracle", {})
    params = baseline_parameters(config)
    if config.method == "flame":
        params["random_state"] = stream_key(config.seed, "flame", round_index)  # fresh noise each round
    result = make_aggregator(config.method, **params)(client_updates(global_params, client_params), num_examples)
    return RoundOutcome(apply_update(global_params, result), list(result.kept), True, bool(result.selects_clients), {})
