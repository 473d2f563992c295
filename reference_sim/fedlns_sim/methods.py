"""Server-side aggregation methods: the six baselines and FedLNS, behind one call per round."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .aggregators import apply_update, client_updates, make_aggregator, paper_parameters
from .seeds import stream_key, stream_seed

BASELINES = ("fedavg", "norm_bounded_fedavg", "coordinate_median", "trimmed_mean", "multi_krum", "flame")
DISPLAY_NAMES = {"fedavg": "FedAvg", "norm_bounded_fedavg": "Norm-Bound", "coordinate_median": "Median",
                 "trimmed_mean": "Trimmed", "multi_krum": "Multi-Krum", "flame": "FLAME", "fedlns": "FedLNS",
                 "fedlns_two": "FedLNS (2-GMM)"}


@dataclass
class RoundOutcome:
    """What the server did in one round."""

    params: dict[str, np.ndarray]   # the new global weights
    kept: list                      # client ids whose updates entered the aggregate
    decided: bool                   # False when the method made no keep/reject decision (FedLNS warming up)
    selects_clients: bool           # True for methods that pick clients (detection rates are meaningful)
    info: dict                      # method diagnostics, JSON-ready


def make_screener(config):
    """The FedLNS screener of a run (None for baselines)."""
    if not config.method.startswith("fedlns"):
        return None
    from fedlns_core import FedLNS

    return FedLNS(activation_threshold=config.activation_threshold,
                  components="two" if config.method == "fedlns_two" else "bic",
                  random_state=stream_seed(config.seed, "screening"))


def baseline_parameters(config) -> dict:
    """Keyword parameters of a baseline; Trimmed Mean and Multi-Krum follow tab:app_robust_agg_params."""
    paper = paper_parameters(config.malicious_fraction, config.clients_per_round)
    if config.method == "trimmed_mean":
        return {"trim_fraction": paper["trimmed_mean"]["trim_fraction"] if config.trim_fraction < 0
                else config.trim_fraction}
    if config.method == "multi_krum":
        f = paper["multi_krum"]["f"] if config.krum_f < 0 else config.krum_f
        m = paper["multi_krum"]["m"] if config.krum_m < 0 else config.krum_m
        return {"f": f, "m": m}
    if config.method == "norm_bounded_fedavg":
        return {"bound": config.norm_bound} if config.norm_bound > 0 else {}
    if config.method == "flame":
        return {"noise_scale": config.flame_noise}
    return {}


def aggregate_round(config, screener, global_params, client_params: dict, num_examples: dict,
                    round_index: int) -> RoundOutcome:
    """One server step of ``config.method`` on the round's local models (dicts keyed by client id)."""
    if screener is not None:
        result = screener.screen(global_params, client_params, num_examples)
        info = {"active": bool(result.active), "bank_size": int(result.bank_size),
                "n_components": result.n_components,
                "rejected_reasons": {str(k): v for k, v in result.rejected.items()}}
        return RoundOutcome(result.aggregate(global_params, client_params), list(result.retained),
                            bool(result.active), True, info)
    params = baseline_parameters(config)
    if config.method == "flame":
        params["random_state"] = stream_key(config.seed, "flame", round_index)   # fresh noise each round
    result = make_aggregator(config.method, **params).run(client_updates(global_params, client_params),
                                                          num_examples)
    return RoundOutcome(apply_update(global_params, result.update), list(result.kept), True,
                        bool(result.selects_clients), {})
