"""Per round of a recorded ``FedLNS()`` run: how alike its updates are, by kind, and where the cohort rule cuts it.

For a run made with ``method=fedlns_default`` and ``record_signatures=true`` (its ``signatures/round-NNNN.npz``
hold each client's update sketch): per round, the mean cosine of the sketches between honest clients, between
attackers and across the two (known from the run's malicious set), then the cut :func:`fedlns_core._cohort.round_parts`
makes at the rule's ``separation`` (whether the parts are apart, and how many attackers are in the part the tree
took as its core), and how many clients the run rejected. Two more columns try a cut that is not the rule's: the
same tree on the sketches *centered* at the round's coordinate-wise median (the direction every client shares
removed), alone and with the ``cohort_cut="significant"`` test. Prints a Markdown table per run.

Usage: python scripts/round_cosines.py RUN_DIR [RUN_DIR ...] [--separation 0.5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fedlns_core._cohort import round_parts
from fedlns_core._support import _unit
from fedlns_sim.runfiles import read_records


def _mean(cosines: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> float:
    block = cosines[np.ix_(rows, columns)]
    if rows is columns:  # within one group: the pairs of distinct members
        k = int(rows.sum())
        return float((block.sum() - np.trace(block)) / (k * (k - 1))) if k > 1 else float("nan")
    return float(block.mean()) if block.size else float("nan")


def _cut(sketches: np.ndarray, attacker: np.ndarray, separation: float, significant: bool = False) -> str:
    """'attackers in the core / core size' of the tree's cut of these sketches, '-' where the parts are not apart."""
    units = _unit(sketches)
    parts = round_parts(units @ units.T, separation=separation, dimension=sketches.shape[1], significant=significant)
    if parts is None or not parts.apart:
        return "-"
    return f"{int(attacker[parts.first].sum())} / {int(parts.first.sum())}"


def table(run_dir: Path, separation: float) -> str:
    records = {r["round"]: r for r in read_records(run_dir)}
    lines = [
        "| round | screened | attackers | honest-honest | attacker-attacker | across | attackers in core / core "
        "size | rejected | centered cut | centered, significant |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path in sorted((run_dir / "signatures").glob("round-*.npz")):
        arrays = np.load(path)
        t = int(path.stem.split("-")[1])
        record = records.get(t)
        if record is None:  # the signatures are saved before the round's record: a round in progress
            continue
        attacker = np.isin(arrays["clients"], record["malicious_sampled"])
        honest = ~attacker
        units = _unit(arrays["sketches"])
        cosines = units @ units.T
        centered = arrays["sketches"] - np.median(arrays["sketches"], axis=0)
        lines.append(
            f"| {t} | {'yes' if record.get('active') else 'no'} | {int(attacker.sum())} | "
            f"{_mean(cosines, honest, honest):.2f} | {_mean(cosines, attacker, attacker):.2f} | "
            f"{_mean(cosines, honest, attacker):.2f} | {_cut(arrays['sketches'], attacker, separation)} | "
            f"{len(record['sampled']) - len(record['kept'])} | {_cut(centered, attacker, separation)} | "
            f"{_cut(centered, attacker, separation, significant=True)} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--separation", type=float, default=0.5, help="FedLNS(separation=) (default: 0.5)")
    args = parser.parse_args(argv)
    for run_dir in args.runs:
        print(f"\n{run_dir.name}\n\n{table(run_dir, args.separation)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
