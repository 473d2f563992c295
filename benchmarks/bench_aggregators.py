"""Server-side cost of the simulator's aggregators on one round of the paper's GPT config.

One round: N = 20 clients, each returning the 148 named float32 arrays of the paper's GPT-style model
(``tab:app_model_architectures``: 12 layers, width 256, 128 positions, GPT-2 vocabulary; P = 22,376,192
parameters; the tied ``lm_head.weight`` is left out as in a deduplicated state dict). Every method goes
from what a server holds (global weights, client weights, example counts) to the next global weights:

* baselines: ``apply_update(w, rule(client_updates(w, clients), counts))``, the simulator's path
  (``fedlns_sim.baselines``, then ``fedlns_core.apply_update``);
* FedLNS: ``FedLNS(activation_threshold=0).screen(...)`` then ``result.aggregate(w, clients)``, for the default
  rule (update sketches, groups, clipping) and ``FedLNS.paper(...)`` (the mixtures);
* FedAvg (core): ``fedlns_core.weighted_average``, the averaging FedLNS itself uses, to separate the
  screening overhead from differences between the two averaging codes.

Wall time is the best of several runs (the machine is shared, so the minimum is the least disturbed);
peak memory is measured in a separate untimed run with ``tracemalloc`` (numpy reports its buffers to it)
and is the peak of new allocations above what the inputs already hold.

The pytest-benchmark tests (one per method, ``ROUNDS`` runs each)::

    .venv/bin/pytest benchmarks/bench_aggregators.py --benchmark-only

The side-by-side table of ``docs/performance.md`` (rounds interleaved across methods, so that load from
other processes on a shared machine falls on all methods alike; ``BENCH_ROUNDS`` sets the count)::

    .venv/bin/python benchmarks/bench_aggregators.py
"""

from __future__ import annotations

import os
import statistics
import time
import tracemalloc

import numpy as np
import pytest

from fedlns_core import apply_update
from fedlns_sim.baselines import client_updates, make_aggregator, paper_parameters

N_CLIENTS = 20
N_MALICIOUS = 8  # 40%, the paper's strongest attack
ROUNDS = 3
SEED = 100


def gpt_shapes(n_layer=12, width=256, n_positions=128, vocab_size=50257):
    """Names and shapes of a GPT-2 state dict (transformers' GPT2LMHeadModel, tied head left out)."""
    shapes = {"transformer.wte.weight": (vocab_size, width), "transformer.wpe.weight": (n_positions, width)}
    for layer in range(n_layer):
        prefix = f"transformer.h.{layer}."
        shapes.update({
            prefix + "ln_1.weight": (width,), prefix + "ln_1.bias": (width,),
            prefix + "attn.c_attn.weight": (width, 3 * width), prefix + "attn.c_attn.bias": (3 * width,),
            prefix + "attn.c_proj.weight": (width, width), prefix + "attn.c_proj.bias": (width,),
            prefix + "ln_2.weight": (width,), prefix + "ln_2.bias": (width,),
            prefix + "mlp.c_fc.weight": (width, 4 * width), prefix + "mlp.c_fc.bias": (4 * width,),
            prefix + "mlp.c_proj.weight": (4 * width, width), prefix + "mlp.c_proj.bias": (width,),
        })
    shapes.update({"transformer.ln_f.weight": (width,), "transformer.ln_f.bias": (width,)})
    return shapes


def make_round(seed=SEED):
    """Global weights, 20 client models (8 with a shifted LayerNorm update) and example counts."""
    rng = np.random.default_rng(seed)
    global_params = {key: (0.02 * rng.standard_normal(shape, dtype=np.float32)) for key, shape in gpt_shapes().items()}
    clients = {}
    for client in range(N_CLIENTS):
        scale = 3.0 if client < N_MALICIOUS else 1.0
        params = {}
        for key, reference in global_params.items():
            step = 1e-3 * (scale if ".ln_" in key else 1.0)
            params[key] = reference + step * rng.standard_normal(reference.shape, dtype=np.float32)
        clients[client] = params
    counts = {client: float(400 + 7 * client) for client in clients}
    return global_params, clients, counts


def _baseline(name, **params):
    aggregator = make_aggregator(name, **params)

    def step(global_params, clients, counts):
        return apply_update(global_params, aggregator(client_updates(global_params, clients), counts))

    return step


def _fedlns(global_params, clients, counts, make=None):
    from fedlns_core import FedLNS

    result = (make or FedLNS)(activation_threshold=0, random_state=0).screen(global_params, clients, counts)
    assert result.active
    return result.aggregate(global_params, clients)


def _fedlns_paper(global_params, clients, counts):
    from fedlns_core import FedLNS

    return _fedlns(global_params, clients, counts, FedLNS.paper)


def _core_fedavg(global_params, clients, counts):
    from fedlns_core import weighted_average

    return weighted_average(global_params, clients, counts)


PAPER = paper_parameters(N_MALICIOUS / N_CLIENTS, N_CLIENTS)
METHODS = {
    "FedAvg": _baseline("fedavg"),
    "FedAvg (core weighted_average)": _core_fedavg,
    "Norm-Bounded FedAvg": _baseline("norm_bounded_fedavg"),
    "Coordinate Median": _baseline("coordinate_median"),
    "Trimmed Mean": _baseline("trimmed_mean", **PAPER["trimmed_mean"]),
    "Multi-Krum": _baseline("multi_krum", **PAPER["multi_krum"]),
    "FLAME": _baseline("flame", random_state=0),
    "FedLNS": _fedlns,
    "FedLNS.paper()": _fedlns_paper,
}


@pytest.fixture(scope="module")
def one_round():
    return make_round()


def peak_mib(function, *args):
    """Peak MiB newly allocated (numpy buffers included) while ``function(*args)`` runs."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        function(*args)
        return (tracemalloc.get_traced_memory()[1] - before) / 2**20
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("method", list(METHODS))
def test_server_step(benchmark, one_round, method):
    global_params, clients, counts = one_round
    function = METHODS[method]
    benchmark.group = "server aggregation, N=20, GPT P=22.4M"
    benchmark.extra_info["peak_mib"] = peak_mib(function, global_params, clients, counts)
    new = benchmark.pedantic(function, args=(global_params, clients, counts), rounds=ROUNDS, iterations=1)
    assert set(new) == set(global_params)
    assert all(np.isfinite(new[key]).all() for key in ("transformer.h.0.ln_1.weight", "transformer.wpe.weight"))


def measure(rounds=5):
    """Interleaved timing: each round runs every method once, so a burst of load from other processes
    on a shared machine hits all methods alike; returns {method: (times, peak_mib)}."""
    global_params, clients, counts = make_round()
    peaks = {method: peak_mib(function, global_params, clients, counts) for method, function in METHODS.items()}
    times = {method: [] for method in METHODS}
    cpu = {method: [] for method in METHODS}
    for _ in range(rounds):
        for method, function in METHODS.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            function(global_params, clients, counts)
            times[method].append(time.perf_counter() - start)
            cpu[method].append(time.process_time() - start_cpu)
    return {method: (times[method], peaks[method], cpu[method]) for method in METHODS}


def table(results, rounds):
    """Markdown table: wall time (best and median of ``rounds``), CPU time (best; all threads of this process,
    less disturbed by other processes) and peak memory, with ratios to FedAvg."""
    base_time, base_peak, base_cpu = min(results["FedAvg"][0]), results["FedAvg"][1], min(results["FedAvg"][2])
    lines = [f"| Method | Wall, best of {rounds} (s) | x FedAvg | Wall, median (s) | CPU, best (s) | x FedAvg "
             "| Peak extra memory (MiB) | x FedAvg |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for method, (times, peak, cpu) in results.items():
        best, best_cpu = min(times), min(cpu)
        lines.append(f"| {method} | {best:.2f} | {best / base_time:.2f} | {statistics.median(times):.2f} | "
                     f"{best_cpu:.2f} | {best_cpu / base_cpu:.2f} | {peak:,.0f} | {peak / base_peak:.2f} |")
    core, core_cpu = min(results["FedAvg (core weighted_average)"][0]), min(results["FedAvg (core weighted_average)"][2])
    for name in ("FedLNS", "FedLNS.paper()"):
        lines += ["", f"{name} / FedAvg (core weighted_average), the screening overhead alone: "
                      f"{min(results[name][0]) / core:.2f}x wall time, {min(results[name][2]) / core_cpu:.2f}x CPU time."]
    return "\n".join(lines)


if __name__ == "__main__":
    ROUNDS_MAIN = int(os.environ.get("BENCH_ROUNDS", "5"))
    print(f"load average before: {os.getloadavg()}", flush=True)
    measured = measure(ROUNDS_MAIN)
    print(f"load average after: {os.getloadavg()}")
    print(table(measured, ROUNDS_MAIN))
