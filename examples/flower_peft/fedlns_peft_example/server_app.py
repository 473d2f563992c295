"""ServerApp: FedAvg over PEFT payloads, wrapped by FedLNSStrategy; held-out loss of each global adapter."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedlns_core import FedLNS
from fedlns_flower import FedLNSStrategy, arrayrecord_to_numpy, numpy_to_arrayrecord
from fedlns_peft_example.task import build_model, evaluate, held_out_blocks, resolve_settings
from fedlns_torch import load_numpy_into_peft_model, peft_state_dict_to_numpy

app = ServerApp()


def run_server(grid: Grid, settings):
    """Run the federated fine-tuning; returns Flower's ``Result`` and the wrapper."""
    torch.set_num_threads(1)
    model = build_model(settings)  # the global model is the PEFT payload: LoRA A/B (and the norms, if trained)
    initial_arrays = numpy_to_arrayrecord({k: v.copy() for k, v in peft_state_dict_to_numpy(model).items()})
    output_dir = Path(str(settings["output-dir"])) if settings["output-dir"] else None
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
    held_out = held_out_blocks(settings)

    def held_out_loss(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        load_numpy_into_peft_model(model, arrayrecord_to_numpy(arrays))
        loss = evaluate(model, held_out)
        if output_dir is not None:
            with open(output_dir / "held_out_loss.jsonl", "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"server_round": server_round, "loss": loss}) + "\n")
        return MetricRecord({"held-out-loss": loss})

    min_nodes = int(settings["min-nodes"])
    strategy = FedLNSStrategy(
        strategy=FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=min_nodes,
                        min_evaluate_nodes=0, min_available_nodes=min_nodes),
        screener=FedLNS(  # signature="auto": LoRA A/B by their LoRA signature, trained norms beside them
            activation_threshold=int(settings["activation-threshold"]),
            random_state=int(settings["seed"]),
        ),
        state_path=str(settings["state-path"]) or None,
        log_path=None if output_dir is None else output_dir / "screening.jsonl",
    )
    result = strategy.start(
        grid=grid, initial_arrays=initial_arrays, num_rounds=int(settings["num-server-rounds"]),
        evaluate_fn=held_out_loss,
    )
    return result, strategy


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point."""
    run_server(grid, resolve_settings(context.run_config))
