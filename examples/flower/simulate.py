"""Run the example in Flower's simulation runtime from Python, with run-config overrides.

``flwr run .`` is the usual way (see README.md); this script does the same through
``flwr.simulation.run_simulation`` so that a test or a notebook can pass settings
directly::

    python simulate.py --num-supernodes 6 --set num-server-rounds=3 --set output-dir=runs/sim

Run it from this folder, or put this folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from fedlns_flower_example.client_app import evaluate_reply, train_reply
from fedlns_flower_example.server_app import run_server
from fedlns_flower_example.task import resolve_settings


def _parse_override(text: str) -> tuple[str, object]:
    key, separator, value = text.partition("=")
    if not separator:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a bare string such as a path


def build_apps(settings) -> tuple[ServerApp, ClientApp]:
    """ServerApp and ClientApp of the example, bound to ``settings`` instead of a run config."""
    server_app = ServerApp()
    client_app = ClientApp()

    @server_app.main()
    def _main(grid: Grid, context: Context) -> None:
        run_server(grid, settings)

    @client_app.train()
    def _train(message: Message, context: Context) -> Message:
        return train_reply(message, context, settings)

    @client_app.evaluate()
    def _evaluate(message: Message, context: Context) -> Message:
        return evaluate_reply(message, context, settings)

    return server_app, client_app


def main(argv=None) -> None:
    """Parse the arguments and run the simulation."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-supernodes", type=int, default=6)
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs Ray may use in all")
    parser.add_argument("--set", dest="overrides", action="append", default=[], type=_parse_override,
                        metavar="KEY=VALUE", help="override a [tool.flwr.app.config] value")
    args = parser.parse_args(argv)
    settings = resolve_settings(dict(args.overrides))
    server_app, client_app = build_apps(settings)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=args.num_supernodes,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": args.num_cpus},
        },
    )


if __name__ == "__main__":
    main()
