"""ClientApp: receive the adapter payload, train it (LoRA; the norms too with train-norms), send the PEFT state dict
back."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedlns_flower import arrayrecord_to_numpy, numpy_to_arrayrecord
from fedlns_peft_example.task import build_model, client_blocks, resolve_settings, train
from fedlns_torch import load_numpy_into_peft_model, peft_state_dict_to_numpy

app = ClientApp()


def train_reply(message: Message, context: Context, settings) -> Message:
    """Train on this node's blocks; reply with ``get_peft_model_state_dict`` as arrays and the example count."""
    torch.set_num_threads(1)  # several ClientApps share the machine's cores
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    attacker = partition_id < int(settings["num-attackers"])
    model = build_model(settings)
    load_numpy_into_peft_model(model, arrayrecord_to_numpy(message.content["arrays"]))
    server_round = int(message.content["config"].get("server-round", 0))
    loss, num_examples = train(
        model, client_blocks(settings, partition_id, num_partitions), settings,
        corrupt_targets=attacker, seed=int(settings["seed"]) * 100_003 + server_round * 1_009 + partition_id,
    )
    if settings["record-dir"]:
        # Ground truth for tests and demos only; the server never reads it.
        record = {"node_id": int(context.node_id), "partition_id": partition_id, "attacker": attacker}
        folder = Path(str(settings["record-dir"]))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"node-{context.node_id}.json").write_text(json.dumps(record), encoding="utf-8")
    content = RecordDict({
        "arrays": numpy_to_arrayrecord(peft_state_dict_to_numpy(model)),
        "metrics": MetricRecord({"train-loss": loss, "num-examples": num_examples}),
    })
    return Message(content=content, reply_to=message)


@app.train()
def train_message(message: Message, context: Context) -> Message:
    """Flower entry point for training messages."""
    return train_reply(message, context, resolve_settings(context.run_config))
