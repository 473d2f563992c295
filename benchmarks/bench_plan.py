"""Cost of the activation planner (pytest-benchmark). Targets, not tests.

Run: ``pytest benchmarks/bench_plan.py --benchmark-columns=median,iqr,rounds``.
Target on a 2-core machine: K=10,000 at most 0.1 s median for any malicious fraction up to 0.45. Only
bank sizes below the Chernoff cut-off are computed exactly, so the cost grows with
``log(1/max_risk) / D(1/2 || alpha)``, not with K: K=100,000 and alpha=0.49 is the slow corner (seconds).
"""

import pytest

from fedlns_core import plan_activation


@pytest.mark.parametrize("num_clients", [200, 10_000, 100_000])
@pytest.mark.parametrize("malicious_fraction", [0.1, 0.4, 0.45])
def test_plan_activation(benchmark, num_clients, malicious_fraction):
    plan = benchmark(plan_activation, num_clients, malicious_fraction, 0.01)
    assert plan.risk <= 0.01
