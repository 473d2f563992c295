"""Server-side cost of fedlns_core (pytest-benchmark). Targets, not tests.

Run: ``pytest benchmarks/bench_core.py --benchmark-columns=median,iqr,rounds``.
Targets on a 2-core machine: ``screen`` with N=20, D=12,800 at most 50 ms median; N=20, D=266,240 at
most 0.5 s. The bank is pre-filled with 200 clients; a round's N participants are drawn from those ids
(for N=1000, 800 of them are new, so the bank holds 1000 ids while screening). The N=20 cases also run
with ``mixture_solver="sklearn"``, the reference solver, for comparison.
"""

import numpy as np
import pytest

from fedlns_core import FedLNS, weighted_average


def gpt_names(layers=12):
    names = [f"transformer.h.{i}.{norm}.{kind}" for i in range(layers) for norm in ("ln_1", "ln_2")
             for kind in ("weight", "bias")]
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def llama7b_names(layers=32):
    names = [f"model.layers.{i}.{norm}.weight" for i in range(layers)
             for norm in ("input_layernorm", "post_attention_layernorm")]
    return names + ["model.norm.weight"]


def make_round(names, width, n_clients, rng, first_id=0):
    global_params = {name: np.ones(width, dtype=np.float32) for name in names}
    clients = {}
    for index in range(n_clients):
        shift = 0.01 if index % 5 == 0 else 0.0          # every fifth client deviates
        clients[first_id + index] = {
            name: (value + shift + 1e-3 * rng.standard_normal(width)).astype(np.float32)
            for name, value in global_params.items()}
    return global_params, clients


def primed_screener(names, width, rng, solver="fast"):
    screener = FedLNS(activation_threshold=200, random_state=0, mixture_solver=solver)
    for start in range(0, 200, 50):
        global_params, clients = make_round(names, width, 50, rng, first_id=start)
        screener.screen(global_params, clients, {cid: 100.0 for cid in clients})
    return screener


@pytest.mark.parametrize("n_clients,solver", [(20, "fast"), (100, "fast"), (1000, "fast"), (20, "sklearn")])
def test_screen_gpt_config(benchmark, n_clients, solver):
    rng = np.random.default_rng(0)
    names = gpt_names()                                   # D = 50 x 256 = 12,800
    screener = primed_screener(names, 256, rng, solver)
    global_params, clients = make_round(names, 256, n_clients, rng)
    counts = {cid: 100.0 for cid in clients}
    result = benchmark(screener.screen, global_params, clients, counts)
    assert result.active and result.bank_size == max(200, n_clients)


@pytest.mark.parametrize("solver", ["fast", "sklearn"])
def test_screen_llama7b_norms(benchmark, solver):
    rng = np.random.default_rng(0)
    names = llama7b_names()                               # D = 65 x 4096 = 266,240
    screener = primed_screener(names, 4096, rng, solver)
    global_params, clients = make_round(names, 4096, 20, rng)
    counts = {cid: 100.0 for cid in clients}
    result = benchmark.pedantic(screener.screen, (global_params, clients, counts), rounds=5, iterations=1)
    assert result.active


def test_weighted_average_gpt_size(benchmark):
    # P = 22.4M parameters in arrays shaped like the paper's GPT (12 blocks, width 256, 50k vocabulary).
    rng = np.random.default_rng(0)
    shapes = {"wte": (50257, 256), "wpe": (128, 256)}
    for block in range(12):
        shapes.update({f"h.{block}.attn": (256, 768), f"h.{block}.proj": (256, 256),
                       f"h.{block}.fc": (256, 1024), f"h.{block}.out": (1024, 256)})
    global_params = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    total = sum(v.size for v in global_params.values())
    assert 22.0e6 < total < 23.0e6
    clients = {cid: {name: value + np.float32(0.001 * cid) for name, value in global_params.items()}
               for cid in range(20)}
    out = benchmark.pedantic(weighted_average, (global_params, clients, {cid: 1.0 for cid in clients}),
                             rounds=3, iterations=1)
    assert out["wte"].dtype == np.float32
