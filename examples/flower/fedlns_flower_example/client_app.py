"""ClientApp: local training of the tiny GPT-2; the first ``num-attackers`` partitions corrupt targets."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedlns_flower import arrayrecord_to_numpy, numpy_to_arrayrecord
from fedlns_flower_example.task import (
    build_model,
    client_blocks,
    evaluate,
    resolve_settings,
    train,
)
from fedlns_torch import load_numpy_into_model, state_dict_to_numpy

app = ClientApp()


def _partition(context: Context) -> tuple[int, int]:
    return int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])


def _model_from(message: Message, settings):
    model = build_model(settings)
    # The reply carries only what the server sent; tied lm_head.weight follows wte.
    load_numpy_into_model(model, arrayrecord_to_numpy(message.content["arrays"]))
    return model


def train_reply(message: Message, context: Context, settings) -> Message:
    """Train on this node's blocks and reply with the full local model and the example count."""
    torch.set_num_threads(1)  # several ClientApps share the machine's cores
    partition_id, num_partitions = _partition(context)
    attacker = partition_id < int(settings["num-attackers"])
    model = _model_from(message, settings)
    blocks = client_blocks(settings, partition_id, num_partitions)
    server_round = int(message.content["config"].get("server-round", 0))
    loss, num_examples = train(
        model,
        blocks,
        settings,
        corrupt_targets=attacker,
        seed=int(settings["seed"]) * 100_003 + server_round * 1_009 + partition_id,
    )
    if settings["record-dir"]:
        # Ground truth for tests and demos only; the server never reads it.
        record = {"node_id": int(context.node_id), "partition_id": partition_id, "attacker": attacker}
        path = Path(str(settings["record-dir"])) / f"node-{context.node_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record), encoding="utf-8")
    content = RecordDict(
        {
            "arrays": numpy_to_arrayrecord(state_dict_to_numpy(model)),
            "metrics": MetricRecord({"train-loss": loss, "num-examples": num_examples}),
        }
    )
    return Message(content=content, reply_to=message)


def evaluate_reply(message: Message, context: Context, settings) -> Message:
    """Loss of the received global model on this node's blocks."""
    torch.set_num_threads(1)
    partition_id, num_partitions = _partition(context)
    model = _model_from(message, settings)
    blocks = client_blocks(settings, partition_id, num_partitions)
    metrics = MetricRecord({"eval-loss": evaluate(model, blocks), "num-examples": len(blocks)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=message)


@app.train()
def train_message(message: Message, context: Context) -> Message:
    """Flower entry point for training messages."""
    return train_reply(message, context, resolve_settings(context.run_config))


@app.evaluate()
def evaluate_message(message: Message, context: Context) -> Message:
    """Flower entry point for evaluation messages."""
    return evaluate_reply(message, context, resolve_settings(context.run_config))
