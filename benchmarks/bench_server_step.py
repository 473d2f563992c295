"""The whole FedLNS server step beside FedAvg's on a LoRA-shaped payload, as a ratio.

Run: ``python benchmarks/bench_server_step.py`` (add ``--solver sklearn`` for the reference mixture,
``--rounds N`` for more repetitions). Prints a markdown table.

The payload is what a federated LoRA client of a LLaMA-7B-shaped model sends with the recipe of
``docs/peft.md``: LoRA r=16 on ``q_proj`` and ``v_proj`` in 32 layers (``lora_A`` 16 x 4,096 and ``lora_B``
4,096 x 16 each: 8,388,608 parameters) plus every RMSNorm weight (65 x 4,096 = 266,240), float32, under
PEFT's key names. N=20 clients per round, every fifth with a larger norm change (so the two-component path
runs). Each screener's bank is primed with 200 clients of the full payload first (four rounds of 50), so every
timed round screens and refreshes 20 of 220 entries, as a running server's does. Before each timed repetition
every screener is copied (untimed), and the FedAvg and FedLNS steps alternate, so all see the same machine state;
the screeners' order rotates from one repetition to the next (use a multiple of 5 repetitions).

* FedAvg: ``fedlns_core.weighted_average`` of all 20 clients (reads every array once).
* FedLNS: ``screener.screen(...)`` (input checks of every array, signatures, bank refresh, median/MAD,
  standardisation, scores, then the retain rule) and ``result.aggregate(...)`` of the retained clients, for
  the default (``FedLNS()``: update sketches, the population's groups, clipping; ``signature="auto"`` reads the
  LoRA signature and the norms, 790,528 numbers per client), the default with the vote before
  ``docs/results/placed-vote`` (``cohort_vote="round"``), the default on one signature
  only (``signature="lora"``: 524,288; ``"norm"``: 266,240) and ``FedLNS.paper()`` (the mixtures on the norms).
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


SCREENERS = {"FedLNS() (default)": (FedLNS, {"signature": "auto"}),
             "FedLNS(cohort_vote=\"round\")": (FedLNS, {"signature": "auto", "cohort_vote": "round"}),
             "FedLNS(signature=\"lora\")": (FedLNS, {"signature": "lora"}),
             "FedLNS(signature=\"norm\")": (FedLNS, {"signature": "norm"}),
             "FedLNS.paper()": (FedLNS.paper, {"signature": "norm"})}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="timed repetitions of each step (default 10)")
    parser.add_argument("--solver", choices=("fast", "sklearn"), default="fast", help="FedLNS's mixture solver")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    shapes = {**lora_shapes(), **norm_shapes()}
    primed = {name: make(**settings, mixture_solver=args.solver, activation_threshold=200, random_state=0)
              for name, (make, settings) in SCREENERS.items()}
    for start in range(0, 200, 50):                                  # the bank: 200 clients of the full payload
        priming = make_round(shapes, 50, rng, first_id=1000 + start)
        for screener in primed.values():
            screener.screen(*priming)
        del priming
    global_params, clients, counts = make_round(shapes, 20, rng, first_id=1000)
    n_params = sum(value.size for value in global_params.values())
    weighted_average(global_params, clients, counts)                # warm-up (page faults, thread pools)
    for screener in primed.values():
        copy.deepcopy(screener).screen(global_params, clients, counts).aggregate(global_params, clients)
    fedavg, steps, screens, results = [], {name: [] for name in primed}, {name: [] for name in primed}, {}
    names = list(primed)
    for repetition in range(args.rounds):                           # the steps alternate, side by side
        start = time.perf_counter()
        weighted_average(global_params, clients, counts)
        fedavg.append(time.perf_counter() - start)
        # Each repetition starts the screeners one further along: the step run first after FedAvg's measured up to
        # 1.6x slower than the same step later in the repetition (page faults after FedAvg's arrays are freed).
        for name in names[repetition % len(names):] + names[: repetition % len(names)]:
            screener = primed[name]
            fresh = copy.deepcopy(screener)                          # untimed: every repetition screens the same bank
            start = time.perf_counter()
            results[name] = fresh.screen(global_params, clients, counts)
            screens[name].append(time.perf_counter() - start)
            results[name].aggregate(global_params, clients)
            steps[name].append(time.perf_counter() - start)
            del fresh
    print(f"N=20 clients, {n_params:,} parameters each (LoRA r={RANK} on q,v + {LAYERS * 2 + 1} RMSNorm weights), "
          f"bank of {results['FedLNS.paper()'].bank_size}, mixture solver {args.solver}, {args.rounds} repetitions.")
    print(f"Machine: {platform.processor() or platform.machine()}, numpy {np.__version__}.\n")
    print("| step | signature | best (s) | median (s) | / FedAvg (median of per-repetition ratios) |")
    print("|---|---:|---:|---:|---:|")
    print(f"| FedAvg (weighted_average of 20 clients) | | {min(fedavg):.3f} | {np.median(fedavg):.3f} | 1 |")
    for name in primed:
        ratio = np.median(np.array(steps[name]) / np.array(fedavg))
        print(f"| {name}: screen + aggregate | {results[name].signature} | {min(steps[name]):.3f} "
              f"| {np.median(steps[name]):.3f} | {ratio:.2f}x |")
        print(f"|   of which screen | | {min(screens[name]):.3f} | {np.median(screens[name]):.3f} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
