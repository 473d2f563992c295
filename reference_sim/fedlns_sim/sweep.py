"""Sweeps: the product of families x partitions x malicious fractions x methods x seeds; finished runs are skipped."""

from __future__ import annotations

import itertools
import json
import time
import traceback
from pathlib import Path

from .config import Config, make_config
from .run import is_finished, run


def sweep_configs(preset: str, families, partitions, fractions, methods, seeds, activation_coverages=(None,),
                  **overrides) -> list[Config]:
    """All configs of a sweep, in a stable order (family, partition, fraction, coverage, seed, method)."""
    configs = []
    for family, partition, fraction, coverage, seed, method in itertools.product(
            families, partitions, fractions, activation_coverages, seeds, methods):
        extra = dict(overrides)
        if coverage is not None:
            extra["activation_coverage"] = float(coverage)
        configs.append(make_config(preset, family, partition=partition, malicious_fraction=float(fraction),
                                   method=method, seed=int(seed), **extra))
    return configs


def sweep(configs: list[Config], out: str | Path, progress: bool = True) -> dict:
    """Run every config not finished yet; one failing run is logged in its folder and does not stop the rest.

    Returns ``{"ran": n, "skipped": n, "failed": [run names]}`` and appends it to ``<out>/sweep_log.jsonl``.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"ran": 0, "skipped": 0, "failed": [], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for config in tqdm(configs, desc="sweep", disable=not progress):
        run_dir = out / config.run_name()
        if is_finished(run_dir, config):
            summary["skipped"] += 1
            continue
        try:
            run(config, out, progress=progress)
            summary["ran"] += 1
        except Exception:   # noqa: BLE001 -- keep the sweep going; the error is written beside the run
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "error.txt").write_text(traceback.format_exc())
            summary["failed"].append(config.run_name())
    summary["ended"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(out / "sweep_log.jsonl", "a") as handle:
        handle.write(json.dumps(summary) + "\n")
    return summary
