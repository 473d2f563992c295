"""The whole FedLNS server step beside FedAvg's on a LoRA-shaped payload, as a ratio.

Run: ``python benchmarks/bench_server_step.py`` (add ``--solver sklearn`` for the reference mixture,
``--rounds N`` for more repetitions). Prints a markdown table.

The payload is what a federated LoRA client of a LLaMA-7B-shaped model sends with the recipe of
``docs/peft.md``: LoRA r=16 on ``q_proj`` and ``v_proj`` in 32 layers (``lora_A`` 16 x 4,096 and ``lora_B``
4,096 x 16 each: 8,388,608 parameters) plus every RMSNorm weight (65 x 4,096 = 266,240), float32, under
PEFT's key names. N=20 clients per round, every fifth with a larger norm change (so the two-component path
runs); the screener's bank is primed with 200 clients first (norm-only payloads, cheap to make), then one
untimed round of the full payload from 20 other clients settles the bank's storage as a running server's is,
so every timed round screens and refreshes 20 of 220 entries. Each repetition screens a copy of the primed screener made before
timing, and the FedAvg and FedLNS steps alternate, so both see the same machine state.

* FedAvg: ``fedlns_core.weighted_average`` of all 20 clients (reads every array once).
* FedLNS: ``screener.screen(...)`` (input checks of every array, signatures, bank refresh, median/MAD,
  standardisation, scores, then the retain rule) and ``result.aggregate(...)`` of the retained clients, for
  the default (``FedLNS()``: update sketches, the population's groups, clipping) and for ``FedLNS.paper()``
  (the mixtures).
"""

from __future__ import annotations

import argparse
import copy
import platform
import time

import numpy as np

from fedlns_core import FedLNS, weighted_average

LAYERS, WIDTH, RANK = 32, 4096, 16


def norm_shapes() -> dict[str, tuple[int, ...]]:
    prefix = "base_model.model.model"
    shapes = {f"{prefix}.layers.{i}.{norm}.weight": (WIDTH,) for i in range(LAYERS)
              for norm in ("input_layernorm", "post_attention_layernorm")}
    shapes[f"{prefix}.norm.weight"] = (WIDTH,)
    return shapes


def lora_shapes() -> dict[str, tuple[int, ...]]:
    prefix = "base_model.model.model"
    shapes = {}
    for i in range(LAYERS):
        for target in ("q_proj", "v_proj"):
            shapes[f"{prefix}.layers.{i}.self_attn.{target}.lora_A.weight"] = (RANK, WIDTH)
            shapes[f"{prefix}.layers.{i}.self_attn.{target}.lora_B.weight"] = (WIDTH, RANK)
    return shapes


def make_round(shapes, n_clients, rng, first_id=0):
    global_params = {key: (np.ones(shape, np.float32) if key.endswith("norm.weight")
                           else 0.01 * rng.standard_normal(shape, dtype=np.float32)) for key, shape in shapes.items()}
    clients = {}
    for index in range(n_clients):
        norm_step = 3e-3 if index % 5 == 0 else 1e-3
        clients[first_id + index] = {
            key: value + (norm_step if key.endswith("norm.weight") else 1e-3)
            * rng.standard_normal(value.shape, dtype=np.float32) for key, value in global_params.items()}
    counts = {client: float(100 + client % 7) for client in clients}
    return global_params, clients, counts


def primed_screener(solver: str, rng, make=FedLNS) -> FedLNS:
    screener = make(activation_threshold=200, random_state=0, mixture_solver=solver)
    for start in range(0, 200, 50):
        global_params, clients, counts = make_round(norm_shapes(), 50, rng, first_id=1000 + start)
        screener.screen(global_params, clients, counts)
    return screener


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed repetitions of each step (default 7)")
    parser.add_argument("--solver", choices=("fast", "sklearn"), default="fast", help="FedLNS's mixture solver")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    primed = {"FedLNS() (default)": primed_screener(args.solver, rng),
              "FedLNS.paper()": primed_screener(args.solver, np.random.default_rng(0), FedLNS.paper)}
    # One untimed round of the full payload first (other ids): the bank's storage then holds what a running
    # server's does (the default's update sketches are float64 sums, so its bank is float64 from the first full
    # round; converting the norm-primed float32 bank once is not a per-round cost).
    settle = make_round({**lora_shapes(), **norm_shapes()}, 20, rng, first_id=5000)
    for screener in primed.values():
        screener.screen(*settle)
    del settle
    global_params, clients, counts = make_round({**lora_shapes(), **norm_shapes()}, 20, rng, first_id=1000)
    n_params = sum(value.size for value in global_params.values())
    # One copy of each primed screener per repetition, made before timing, so every repetition screens the
    # same round against the same bank and no copy is timed.
    screeners = {name: [copy.deepcopy(screener) for _ in range(args.rounds + 1)] for name, screener in primed.items()}
    weighted_average(global_params, clients, counts)                # warm-up (page faults, thread pools)
    for copies in screeners.values():
        copies.pop().screen(global_params, clients, counts).aggregate(global_params, clients)
    fedavg, steps, screens, results = [], {name: [] for name in primed}, {name: [] for name in primed}, {}
    for repetition in range(args.rounds):                           # the steps alternate, side by side
        start = time.perf_counter()
        weighted_average(global_params, clients, counts)
        fedavg.append(time.perf_counter() - start)
        for name, copies in screeners.items():
            start = time.perf_counter()
            results[name] = copies[repetition].screen(global_params, clients, counts)
            screens[name].append(time.perf_counter() - start)
            results[name].aggregate(global_params, clients)
            steps[name].append(time.perf_counter() - start)
    print(f"N=20 clients, {n_params:,} parameters each (LoRA r={RANK} on q,v + {LAYERS * 2 + 1} RMSNorm weights), "
          f"bank of {results['FedLNS.paper()'].bank_size}, mixture solver {args.solver}, {args.rounds} repetitions.")
    print(f"Machine: {platform.processor() or platform.machine()}, numpy {np.__version__}.\n")
    print("| step | best (s) | median (s) | / FedAvg (median of per-repetition ratios) |")
    print("|---|---:|---:|---:|")
    print(f"| FedAvg (weighted_average of 20 clients) | {min(fedavg):.3f} | {np.median(fedavg):.3f} | 1 |")
    for name in primed:
        ratio = np.median(np.array(steps[name]) / np.array(fedavg))
        print(f"| {name}: screen + aggregate | {min(steps[name]):.3f} | {np.median(steps[name]):.3f} | {ratio:.2f}x |")
        print(f"|   of which screen | {min(screens[name]):.3f} | {np.median(screens[name]):.3f} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
