"""Sweeps: the product of families x partitions x malicious fractions x methods x seeds; finished runs are skipped.

``jobs`` runs that many runs at once, each in its own process (the runs are independent and single-threaded at
CPU scale); or, with ``ray``, every run is a Ray task on a local Ray instance or an existing cluster, scheduled by
the CPUs and GPUs it asks for (``docs/simulator.md``: a multi-GPU node, a cluster). A failing run writes its
traceback to ``<out>/failed/<run name>.txt`` and the sweep goes on; the file goes away once the run finishes.
Rerunning the same sweep command resumes an interrupted sweep: finished runs are skipped, interrupted ones resume
from their last completed round, whichever backend ran them.
"""

from __future__ import annotations

import itertools
import json
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from . import runfiles
from .config import Config, make_config


def sweep_configs(
    preset: str,
    families,
    partitions,
    fractions,
    methods,
    seeds,
    activation_coverages=(None,),
    references: bool = False,
    attacks=(None,),
    **overrides,
) -> list[Config]:
    """All configs of a sweep, in a stable order (family, partition, fraction, attack, coverage, seed, method).

    With ``references``, each (family, partition, seed) also gets its clean run (FedAvg with no malicious
    client) and each attacked fraction its oracle run (FedAvg over the benign clients only), once: neither depends
    on the attack, so both run with the config's. ``attacks`` (None: the config's) is an axis like the others.
    """
    configs, seen = [], set()

    def add(family, partition, fraction, method, seed, extra):
        config = make_config(
            preset,
            family,
            partition=partition,
            malicious_fraction=float(fraction),
            method=method,
            seed=int(seed),
            **extra,
        )
        if config.run_name() not in seen:
            seen.add(config.run_name())
            configs.append(config)

    for family, partition, fraction, attack, coverage, seed, method in itertools.product(
        families, partitions, fractions, attacks, activation_coverages, seeds, methods
    ):
        extra = dict(overrides, **({"attack": attack} if attack is not None else {}))
        if coverage is not None:
            extra["activation_coverage"] = float(coverage)
        add(family, partition, fraction, method, seed, extra)
        if references:  # neither depends on the attack: without attackers, or without their updates
            add(family, partition, 0.0, "fedavg", seed, overrides)
            if fraction > 0:
                add(family, partition, fraction, "oracle", seed, overrides)
    return configs


def run_one(config: Config, out: str | Path, progress: bool = False) -> str | None:
    """Run one config; returns None, or the traceback when it failed (also written under ``<out>/failed/``)."""
    from .run import run

    failed = Path(out) / "failed" / f"{config.run_name()}.txt"
    try:
        run(config, out, progress=progress)
    except Exception:  # noqa: BLE001 -- keep the sweep going; the error is written down
        failed.parent.mkdir(parents=True, exist_ok=True)
        failed.write_text(traceback.format_exc())
        return failed.read_text()
    failed.unlink(missing_ok=True)
    return None


def sweep(
    configs: list[Config],
    out: str | Path,
    progress: bool = True,
    jobs: int = 1,
    ray: str | None = None,
    cpus_per_run: float = 1.0,
    gpus_per_run: float = 0.0,
) -> dict:
    """Run every config not finished yet, ``jobs`` at a time; one failing run does not stop the rest.

    With ``ray`` (``"local"``: start a Ray instance on this machine for the sweep, ``jobs`` CPUs if given; else
    the address of a running cluster, e.g. ``"127.0.0.1:6379"`` or ``"ray://head:10001"``), each run is a Ray
    task that asks for ``cpus_per_run`` CPUs and ``gpus_per_run`` GPUs (a fraction packs several runs on one
    GPU); Ray runs as many at once as the cluster's resources allow. ``out`` must then be a folder every
    worker node sees (a shared filesystem on a multi-node cluster).

    Returns ``{"ran": n, "skipped": n, "failed": [run names]}`` and appends it to ``<out>/sweep_log.jsonl``.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "ran": 0,
        "skipped": 0,
        "failed": [],
        "jobs": jobs,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    todo = [c for c in configs if not runfiles.is_finished(out / c.run_name(), c.rounds)]
    if todo:  # the same run finished under another name (one an earlier naming scheme gave it) counts too
        made = runfiles.finished_experiments(out)
        todo = [c for c in todo if runfiles.experiment_key(c.to_dict()) not in made]
    summary["skipped"] = len(configs) - len(todo)
    bar = tqdm(total=len(todo), desc="sweep", disable=not progress)

    def done(config, error):
        if error is None:
            summary["ran"] += 1
        else:
            summary["failed"].append(config.run_name())
        bar.update()

    if ray is not None:
        _sweep_on_ray(todo, out, ray, jobs, cpus_per_run, gpus_per_run, done)
    elif jobs <= 1:
        for config in todo:
            done(config, run_one(config, out, progress))
    else:  # spawn: fresh interpreters, no torch state inherited from this one
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(run_one, config, out): config for config in todo}
            for future in as_completed(futures):
                done(futures[future], future.result())
    bar.close()
    summary["ended"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(out / "sweep_log.jsonl", "a") as handle:
        handle.write(json.dumps(summary) + "\n")
    return summary


def _sweep_on_ray(
    todo: list[Config], out: Path, address: str, jobs: int, cpus_per_run: float, gpus_per_run: float, done
) -> None:
    """Each run as a Ray task (``sweep``'s ``ray`` backend); ``done(config, error)`` as each one ends."""
    import ray

    if cpus_per_run <= 0 or gpus_per_run < 0:
        raise ValueError(f"need cpus_per_run > 0 and gpus_per_run >= 0, got {cpus_per_run} and {gpus_per_run}")
    started_here = not ray.is_initialized()
    if started_here:
        if address == "local":
            ray.init(
                num_cpus=max(jobs, 1) if jobs > 1 else None,
                include_dashboard=False,
                configure_logging=False,
                log_to_driver=False,
            )
        else:
            ray.init(address=address, configure_logging=False, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=0)(run_one)
        pending = {task.remote(config, str(out)): config for config in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            config = pending.pop(ready[0])
            try:
                error = ray.get(ready[0])
            except Exception as failure:  # noqa: BLE001 -- the worker itself died (killed, out of memory, ...)
                error = f"the Ray task failed: {type(failure).__name__}: {failure}"
                failed = Path(out) / "failed" / f"{config.run_name()}.txt"
                failed.parent.mkdir(parents=True, exist_ok=True)
                failed.write_text(error)
            done(config, error)
    finally:
        if started_here:
            ray.shutdown()
