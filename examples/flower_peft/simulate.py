"""Run the PEFT example in Flower's simulation runtime from Python, with run-config overrides.

``flwr run .`` is the usual way (see README.md); this does the same through
``flwr.simulation.run_simulation`` so that a test can pass settings directly::

    python simulate.py --num-supernodes 6 --set data-file=/path/to/input.txt --set output-dir=runs/sim
"""

from __future__ import annotations

import argparse
import json

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from fedlns_peft_example.client_app import train_reply
from fedlns_peft_example.server_app import run_server
from fedlns_peft_example.task import resolve_settings


def _override(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a bare string such as a path


def main(argv=None) -> None:
    """Parse the arguments and run the simulation."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-supernodes", type=int, default=6)
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs Ray may use in all")
    parser.add_argument("--set", dest="overrides", action="append", default=[], type=_override,
                        metavar="KEY=VALUE", help="override a [tool.flwr.app.config] value")
    args = parser.parse_args(argv)
    settings = resolve_settings(dict(args.overrides))
    server_app, client_app = ServerApp(), ClientApp()
    server_app.main()(lambda grid, context: run_server(grid, settings))
    client_app.train()(lambda message, context: train_reply(message, context, settings))
    run_simulation(
        server_app=server_app, client_app=client_app, num_supernodes=args.num_supernodes,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": args.num_cpus}},
    )


if __name__ == "__main__":
    main()
