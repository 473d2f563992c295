"""ServerApp: FedAvg wrapped by FedLNSStrategy (the one-line addition)."""

from __future__ import annotations

from pathlib import Path

import torch
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedlns_core import FedLNS
from fedlns_flower import FedLNSStrategy, numpy_to_arrayrecord
from fedlns_flower_example.task import build_model, resolve_settings
from fedlns_torch import norm_selector, state_dict_to_numpy

app = ServerApp()


def run_server(grid: Grid, settings):
    """Run the federated training; returns Flower's ``Result`` and the wrapper."""
    torch.manual_seed(int(settings["seed"]))  # the same initial model on every run
    model = build_model(settings)
    initial_arrays = numpy_to_arrayrecord(state_dict_to_numpy(model))

    output_dir = Path(str(settings["output-dir"])) if settings["output-dir"] else None
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)

    min_nodes = int(settings["min-nodes"])
    fedavg = FedAvg(
        fraction_train=1.0,
        fraction_evaluate=float(settings["fraction-evaluate"]),
        min_train_nodes=min_nodes,
        min_evaluate_nodes=min_nodes if float(settings["fraction-evaluate"]) > 0 else 0,
        min_available_nodes=min_nodes,
    )
    strategy = FedLNSStrategy(
        strategy=fedavg,
        screener=FedLNS(
            selector=norm_selector(model),  # LayerNorm parameters found by module type
            activation_threshold=int(settings["activation-threshold"]),
            random_state=int(settings["seed"]),
        ),
        state_path=str(settings["state-path"]) or None,
        log_path=None if output_dir is None else output_dir / "screening.jsonl",
    )
    result = strategy.start(
        grid=grid,
        initial_arrays=initial_arrays,
        num_rounds=int(settings["num-server-rounds"]),
    )
    return result, strategy


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point."""
    run_server(grid, resolve_settings(context.run_config))
