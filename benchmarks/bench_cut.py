"""What the cohort rule's cut of a round costs, with its significance test (``cohort_cut="significant"``), by
round size.

Run: ``python benchmarks/bench_cut.py`` (``--repeats R`` for more repetitions). Prints a markdown table.

``fedlns_core._cohort.round_parts`` on the (N, N) cosines of one round's update sketches (length 2,048):

* *one population*: N honest updates that agree weakly (cosines about 0.04 +- 0.05, as a small masked model's
  LoRA updates do). The tree usually finds a group to cut; the test usually stops at its first simulated round.
* *two groups*: 60% honest, 40% attackers sharing a direction. The cut is significant, so all of the test's
  simulated rounds run: the test's whole cost.

Both are beside the tree alone (``_best_cut``, the rule before the test).
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from fedlns_core._cohort import NULL_ROUNDS, _best_cut, round_parts
from fedlns_core._support import _unit


def cosines(rows: list[np.ndarray]) -> np.ndarray:
    units = _unit(np.stack(rows))
    return units @ units.T


def rounds(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    dim = 2048
    shared, attack = rng.standard_normal(dim), rng.standard_normal(dim)
    weak = [0.2 * shared + rng.standard_normal(dim) for _ in range(n)]
    weak = [np.concatenate([row[:400], np.zeros(dim - 400)]) for row in weak]  # 400 effective dimensions
    honest = [0.6 * shared + rng.standard_normal(dim) for _ in range(n - (2 * n) // 5)]
    split = honest + [attack + rng.standard_normal(dim) for _ in range((2 * n) // 5)]
    return {"one population": cosines(weak), "two groups": cosines(split)}


def best_time(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{platform.processor() or platform.machine()}, {NULL_ROUNDS} simulated rounds; best of {args.repeats}\n")
    print("| clients per round | round | tree alone (ms) | with the test (ms) | cut by the tree | cut with the test |")
    print("|---:|---|---:|---:|---|---|")
    for n in (10, 20, 50, 100):
        for name, matrix in rounds(n, rng).items():
            tree = best_time(lambda: _best_cut(matrix, 0.5, None), args.repeats)
            full = best_time(lambda: round_parts(matrix, separation=0.5, significant=True), args.repeats)
            tree_cut, test_cut = (round_parts(matrix, separation=0.5, significant=flag).apart for flag in (False, True))
            print(
                f"| {n} | {name} | {1e3 * tree:.2f} | {1e3 * full:.1f} | {'yes' if tree_cut else 'no'} | "
                f"{'yes' if test_cut else 'no'} |"
            )


if __name__ == "__main__":
    main()
