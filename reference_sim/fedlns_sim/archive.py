"""Results that can be checked: archive finished runs beside their tables, and re-run named cells to compare.

``archive(runs, dest)`` adds every finished run to ``dest/runs.tar.xz`` (:mod:`.runstore`; the runs it held stay,
a run archived again is replaced): its ``config.json`` (without this machine's data path: its ``data_source``
names the text), its ``rounds.jsonl`` and a ``state.json`` with its round count (no checkpoint), so archived runs
extracted into a runs folder count as finished for any sweep. ``dest/verify.txt`` lists the cells that
``verify`` re-runs. ``verify(dest)`` re-runs those cells from their stored configs and compares every recorded
number except wall times, exactly, and every rejection reason (reading a LoRA signature's "LoRA change" as the
"normalization change" that runs made before the reasons named the signature recorded).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from . import runfiles
from .config import FAMILIES, config_from_dict
from .runstore import ARCHIVE, read_archive, stored_runs, write_archive

TIMINGS = ("client_time_s", "server_time_s", "eval_time_s")


def archive(runs: str | Path, dest: str | Path, cells=None) -> dict:
    """Add the finished runs under ``runs`` to ``dest/runs.tar.xz`` and write ``dest/verify.txt``.

    Parameters
    ----------
    runs : str or Path
        A runs folder, an archive, or a results folder holding one (see :func:`.runstore.stored_runs`).
    dest : str or Path
        The results folder. Runs already in its archive stay, in their order; a run archived again replaces its
        earlier copy; new runs follow.
    cells : list of str, optional
        Run names for ``verify.txt``; by default :func:`default_cells` of every archived run.

    Returns
    -------
    dict
        ``runs``: how many runs this call archived; ``archived``: how many the archive holds; ``cells``.
    """
    runs, dest = Path(runs), Path(dest)
    finished = {name: _archived_files(name, files) for name, files in stored_runs(runs) if _is_finished(files)}
    if not finished:
        raise FileNotFoundError(f"no finished run under {runs}")
    path = dest / ARCHIVE
    # everything is read before anything is written, and the archive is replaced, never written in place:
    # the source may be this archive itself
    held = {**(read_archive(path) if path.is_file() else {}), **finished}
    metas = {name: json.loads(files["config.json"]) for name, files in held.items()}
    if cells is None:
        cells = default_cells(list(metas.values()), list(metas))
    missing = [c for c in cells if c not in held]
    if missing:
        raise ValueError(f"cells to verify are not among the archived runs: {', '.join(missing)}")
    dest.mkdir(parents=True, exist_ok=True)
    write_archive(path, held)
    runfiles.atomic_write(dest / "verify.txt", "".join(f"{cell}\n" for cell in cells).encode())
    return {"runs": len(finished), "archived": len(held), "cells": list(cells)}


def _is_finished(files: dict[str, bytes]) -> bool:
    """Whether a stored run completed its rounds: by its ``state.json``, or its records when it has none."""
    rounds = json.loads(files["config.json"])["config"]["rounds"]
    return _completed_round(files) >= rounds


def _completed_round(files: dict[str, bytes]) -> int:
    """The last completed round of a stored run (0 when none)."""
    if "state.json" in files:
        return json.loads(files["state.json"])["round"]
    records = runfiles.parse_records(files["rounds.jsonl"])
    return records[-1]["round"] if records else 0


def _archived_files(name: str, files: dict[str, bytes]) -> dict[str, bytes]:
    """A finished run's files as the archive keeps them: the config without this machine's data folder, the
    records as they are, and the run's state without its checkpoint (copied back into a runs folder, any version
    of the sweep sees the run as finished and skips it)."""
    if not runfiles.parse_records(files["rounds.jsonl"]):
        raise ValueError(f"{name}: its rounds.jsonl holds no record")
    meta = json.loads(files["config.json"])
    if meta["config"]["data"] != "synthetic":  # a folder path of this machine: the data source names the text
        meta["config"]["data"] = ""
    return {
        "config.json": json.dumps(meta, indent=2).encode(),
        "rounds.jsonl": files["rounds.jsonl"],
        "state.json": json.dumps({"round": _completed_round(files), "checkpoint": None}).encode(),
    }


def default_cells(metas: list[dict], names: list[str]) -> list[str]:
    """Per family, FedLNS at the largest fraction, IID if present, lowest seed: the cells most worth checking."""
    cells = []
    for family in FAMILIES:
        candidates = [
            (meta["config"]["partition"] != "iid", -meta["config"]["malicious_fraction"], meta["config"]["seed"], name)
            for meta, name in zip(metas, names)
            if meta["config"]["family"] == family and meta["config"]["method"] == "fedlns"
        ]
        if candidates:
            cells.append(min(candidates)[-1])
    return cells


def verify(results: str | Path, runs=None, data=None, out=None, jobs: int = 2, rtol: float | None = None) -> int:
    """Re-run the named cells of a results folder; print each comparison; 0 when every number matches.

    Equal numbers need the same code *and* the same kind of processor: AVX2 and AVX-512 kernels round differently, so
    can two processors with the same kernels but other extensions (AVX512-FP16), and 40 rounds of training amplify a
    last-bit difference. So a cell that differs is also summarised (largest
    relative difference of the evaluation loss, rounds whose screening decisions differ, best and last-10
    perplexity both ways) beside the machine it was made on; with ``rtol``, a cell whose best and last-10
    perplexity agree within ``rtol`` (relative) counts as reproduced within it.
    """
    from .report import machine_text
    from .run import machine_identity
    from .sweep import sweep

    results = Path(results)
    names = runs or [line.strip() for line in (results / "verify.txt").read_text().splitlines() if line.strip()]
    archived = {name: files for name, files in stored_runs(results) if name in names}
    configs, stored = [], {}
    for name in names:
        if name not in archived:
            raise FileNotFoundError(f"{results} holds no archived run {name}")
        meta = json.loads(archived[name]["config.json"])
        values = dict(meta["config"], **({"data": data} if data is not None else {}))
        config = config_from_dict(values)  # settings added since: the value they had then (LEGACY), else the default
        added = sorted(set(config.to_dict()) - set(meta["config"]))
        if added:
            shown = ", ".join(f"{key}={getattr(config, key)!r}" for key in added)
            print(
                f"{name}: settings added since it was made, at the values the run had (LEGACY) or their defaults: {shown}"
            )
        configs.append(config)
        stored[name] = (meta, runfiles.parse_records(archived[name]["rounds.jsonl"]))
    scratch = Path(out) if out else Path(tempfile.mkdtemp(prefix="fedlns-verify-"))
    sweep(configs, scratch, progress=False, jobs=jobs)
    current = runfiles.code_identity()["source"]
    exact = close = 0
    for name, config in zip(names, configs):
        meta, expected = stored[name]
        actual = runfiles.read_records(scratch / config.run_name())
        same_code = (meta.get("code") or {}).get("source") == current
        difference = first_difference(expected, actual)
        print(
            f"{name}: {'same numbers' if difference is None else f'DIFFERENT: {difference}'} "
            f"({len(actual) - 1} rounds; archived code {'=' if same_code else '!='} this code)"
        )
        if difference is None:
            exact += 1
            continue
        here = machine_identity(config.device if config.device != "auto" else "cpu")
        print(f"    made on: {machine_text(meta.get('machine'))}; re-run on: {machine_text(here)}")
        summary = closeness(expected, actual)
        print(f"    how close: {summary['text']}")
        if rtol is not None and len(expected) == len(actual) and summary["largest_ppl_difference"] <= rtol:
            close += 1
    verdict = f"verify: {exact} of {len(configs)} cells reproduce"
    if rtol is not None:
        verdict += f", {close} more within rtol {rtol:g} of best and last-10 perplexity"
    print(f"{verdict} (re-runs in {scratch})")
    return 0 if exact + close == len(configs) else 1


def closeness(expected: list[dict], actual: list[dict]) -> dict:
    """How far a re-run is from its archive: the largest relative difference of the evaluation loss over the
    rounds, the rounds whose kept/rejected labels differ, and the best and last-10 perplexity of each."""
    from .report.stats import best_checkpoint, finite_loss, last10_loss, perplexity

    pairs = [(old, new) for old, new in zip(expected, actual) if old.get("round") == new.get("round")]
    loss = [
        abs(new["eval_loss"] - old["eval_loss"]) / abs(old["eval_loss"])
        for old, new in pairs
        if old.get("eval_loss") is not None and new.get("eval_loss") is not None
    ]
    decided = [(old, new) for old, new in pairs if "label" in old or "label" in new]
    flipped = sum(old.get("label") != new.get("label") for old, new in decided)

    def perplexities(records):  # best checkpoint and last 10 rounds, as the report reads them
        if not any(r["round"] >= 1 for r in records):
            return float("nan"), float("nan")
        return perplexity(finite_loss(best_checkpoint(records))), perplexity(last10_loss(records))

    (best_old, last_old), (best_new, last_new) = perplexities(expected), perplexities(actual)
    largest = max(abs(best_new - best_old) / best_old, abs(last_new - last_old) / last_old)
    text = (
        f"evaluation loss within {max(loss, default=0.0):.1e} (relative) over {len(pairs)} rounds; screening "
        f"labels differ in {flipped} of {len(decided)} rounds; best perplexity {best_old:.2f} -> {best_new:.2f}, "
        f"last-10 {last_old:.2f} -> {last_new:.2f}"
    )
    return {
        "largest_loss_difference": max(loss, default=0.0),
        "label_rounds_differing": flipped,
        "largest_ppl_difference": largest if math.isfinite(largest) else float("inf"),
        "text": text,
    }


def first_difference(expected: list[dict], actual: list[dict]) -> str | None:
    """The first recorded number that differs (wall times aside), or None."""
    if len(expected) != len(actual):
        return f"{len(expected)} records archived, {len(actual)} re-run"
    for old, new in zip(expected, actual):
        for key in sorted(set(old) | set(new)):
            if key in TIMINGS:
                continue
            if _comparable(key, old.get(key)) != _comparable(key, new.get(key)):
                return f"round {old.get('round')}: {key} was {old.get(key)!r}, now {new.get(key)!r}"
    return None


def _comparable(key: str, value):
    """``value`` as compared: a rejection reason with the signature named as the paper's ("normalization change";
    runs of the LoRA signature made before the reasons named it say so), everything else as recorded."""
    if key != "rejected_reasons" or not isinstance(value, dict):
        return value
    return {
        client: reason.replace("LoRA and normalization change", "normalization change").replace(
            "LoRA change", "normalization change"
        )
        for client, reason in value.items()
    }
