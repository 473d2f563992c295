"""Server-side cost of the simulator's aggregators on one round of the paper's GPT config.

One round: N = 20 clients, each returning the 148 named float32 arrays of the paper's GPT-style model
(``tab:app_model_architectures``: 12 layers, width 256, 128 positions, GPT-2 vocabulary; P = 22,376,192
parameters; the tied ``lm_head.weight`` is left out as in a deduplicated state dict). Every method goes
from what a server holds (global weights, client weights, example counts) to the next global weights:

* baselines: ``apply_update(w, rule(client_updates(w, clients), counts))``, the simulator's path;
* FedLNS: ``FedLNS(activation_threshold=0).screen(...)`` then ``result.aggregate(w, clients)``;
* FedAvg (core): ``fedlns_core.weighted_average``, the averaging FedLNS itself uses, to separate the
  screening overhead from differences between the two averaging codes.

Wall time is the best of ``ROUNDS`` runs (the machine is shared, so the minimum is the least disturbed);
peak memory is measured in a separate untimed run with ``tracemalloc`` (numpy reports its buffers to it)
and is the peak of new allocations above what the inputs already hold.

Run the table (pytest-benchmark under the hood)::

    .venv/bin/python benchmarks/bench_aggregators.py

or only the pytest-benchmark tests::

    .venv/bin/pytest benchmarks/bench_aggregators.py --benchmark-only
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import tracemalloc

import numpy as np
import pytest

from fedlns_sim.aggregators import apply_update, client_updates, make_aggregator, paper_parameters

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


def _fedlns(global_params, clients, counts):
    from fedlns_core import FedLNS

    result = FedLNS(activation_threshold=0, random_state=0).screen(global_params, clients, counts)
    assert result.active
    return result.aggregate(global_params, clients)


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


def table(results_json):
    """Markdown table (ratios to FedAvg) from a pytest-benchmark JSON file."""
    with open(results_json) as handle:
        report = json.load(handle)
    rows = {bench["params"]["method"]: bench for bench in report["benchmarks"]}
    base = rows["FedAvg"]
    lines = ["| Method | Wall time (s, best of %d) | x FedAvg | Peak extra memory (MiB) | x FedAvg |" % ROUNDS,
             "|---|---:|---:|---:|---:|"]
    for method in METHODS:
        bench = rows[method]
        seconds, peak = bench["stats"]["min"], bench["extra_info"]["peak_mib"]
        lines.append(f"| {method} | {seconds:.2f} | {seconds / base['stats']['min']:.2f} | {peak:,.0f} | "
                     f"{peak / base['extra_info']['peak_mib']:.2f} |")
    core = rows["FedAvg (core weighted_average)"]
    lines.append("")
    lines.append(f"FedLNS / FedAvg (core weighted_average), the screening overhead alone: "
                 f"{rows['FedLNS']['stats']['min'] / core['stats']['min']:.2f}x wall time.")
    return "\n".join(lines)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        output = os.path.join(folder, "bench.json")
        command = [sys.executable, "-m", "pytest", __file__, "-q", "--benchmark-only",
                   f"--benchmark-json={output}", "--benchmark-columns=min,median,max"]
        completed = subprocess.run(command, check=False)
        if completed.returncode != 0:
            sys.exit(completed.returncode)
        print()
        print(table(output))
