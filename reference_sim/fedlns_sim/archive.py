"""Results that can be checked: archive finished runs beside their tables, and re-run named cells to compare.

``archive(runs, dest)`` copies every finished run's ``config.json`` (without this machine's data path: its
``data_source`` names the text) and its ``rounds.jsonl`` (gzip-compressed, with a fixed timestamp so the same run
always gives the same bytes) to ``dest/runs/<run name>/``, and lists in
``dest/verify.txt`` the cells that ``verify`` re-runs. Each archived run keeps a ``state.json`` with its round
count (no checkpoint), so archived runs copied back into a runs folder count as finished for any sweep. ``verify(dest)`` re-runs those cells from their stored
configs and compares every recorded number except wall times, exactly.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import tempfile
from pathlib import Path

from . import runfiles
from .config import FAMILIES, config_from_dict

TIMINGS = ("client_time_s", "server_time_s", "eval_time_s")


def archive(runs: str | Path, dest: str | Path, cells=None) -> dict:
    """Copy finished runs under ``runs`` to ``dest/runs/`` and write ``dest/verify.txt``."""
    runs, dest = Path(runs), Path(dest)
    finished = []
    for config_path in sorted(runs.rglob("config.json")):
        meta = json.loads(config_path.read_text())
        if runfiles.is_finished(config_path.parent, meta["config"]["rounds"]):
            finished.append((config_path.parent, meta))
    if not finished:
        raise FileNotFoundError(f"no finished run under {runs}")
    for folder, _ in finished:
        # everything is read before anything is written, and every file is replaced, never written in place: the
        # source may be an archived run itself, or hard-linked to the destination (cp -al), and must stay intact
        meta = json.loads((folder / "config.json").read_text())
        if meta["config"]["data"] != "synthetic":   # a folder path of this machine: the data source names the text
            meta["config"]["data"] = ""
        packed = _packed_records(folder)
        # a finished run's state, without its checkpoint: copied back into a runs folder, any version of the
        # sweep sees the run as finished and skips it
        rounds = json.loads((folder / "state.json").read_text())["round"] if (folder / "state.json").is_file() \
            else runfiles.read_records(folder)[-1]["round"]
        target = dest / "runs" / folder.name
        target.mkdir(parents=True, exist_ok=True)
        runfiles.atomic_write(target / "config.json", json.dumps(meta, indent=2).encode())
        runfiles.atomic_write(target / "rounds.jsonl.gz", packed)
        runfiles.atomic_write(target / "state.json", json.dumps({"round": rounds, "checkpoint": None}).encode())
    names = {folder.name for folder, _ in finished}
    if cells is None:
        cells = default_cells([meta for _, meta in finished], [folder.name for folder, _ in finished])
    missing = [c for c in cells if c not in names]
    if missing:
        raise ValueError(f"cells to verify are not among the finished runs: {', '.join(missing)}")
    (dest / "verify.txt").write_text("".join(f"{cell}\n" for cell in cells))
    return {"runs": len(finished), "cells": list(cells)}


def _packed_records(folder: Path) -> bytes:
    """The run's ``rounds.jsonl``, gzip-compressed with no timestamp or name (the same run, the same bytes); an
    already archived run's ``rounds.jsonl.gz`` as it is."""
    if not (folder / "rounds.jsonl").is_file():
        packed = (folder / "rounds.jsonl.gz").read_bytes()
        if not gzip.decompress(packed).strip():
            raise ValueError(f"{folder}: its archived rounds.jsonl.gz holds no record")
        return packed
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as packing:
        packing.write((folder / "rounds.jsonl").read_bytes())
    return buffer.getvalue()


def default_cells(metas: list[dict], names: list[str]) -> list[str]:
    """Per family, FedLNS at the largest fraction, IID if present, lowest seed: the cells most worth checking."""
    cells = []
    for family in FAMILIES:
        candidates = [(meta["config"]["partition"] != "iid", -meta["config"]["malicious_fraction"],
                       meta["config"]["seed"], name)
                      for meta, name in zip(metas, names)
                      if meta["config"]["family"] == family and meta["config"]["method"] == "fedlns"]
        if candidates:
            cells.append(min(candidates)[-1])
    return cells


def verify(results: str | Path, runs=None, data=None, out=None, jobs: int = 2, rtol: float | None = None) -> int:
    """Re-run the named cells of a results folder; print each comparison; 0 when every number matches.

    Equal numbers need the same code *and* the same kind of processor: AVX2 and AVX-512 kernels round differently,
    and 40 rounds of training amplify a last-bit difference. So a cell that differs is also summarised (largest
    relative difference of the evaluation loss, rounds whose screening decisions differ, best and last-10
    perplexity both ways) beside the machine it was made on; with ``rtol``, a cell whose best and last-10
    perplexity agree within ``rtol`` (relative) counts as reproduced within it.
    """
    from .report import machine_text
    from .run import machine_identity
    from .sweep import sweep

    results = Path(results)
    names = runs or [line.strip() for line in (results / "verify.txt").read_text().splitlines() if line.strip()]
    configs, stored = [], {}
    for name in names:
        folder = results / "runs" / name
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder} holds no archived run")
        meta = json.loads((folder / "config.json").read_text())
        values = dict(meta["config"], **({"data": data} if data is not None else {}))
        config = config_from_dict(values)   # settings added since the run was made take their defaults
        added = sorted(set(config.to_dict()) - set(meta["config"]))
        if added:
            print(f"{name}: settings added since it was made, at their defaults: {', '.join(added)}")
        configs.append(config)
        stored[name] = (meta, runfiles.read_records(folder))
    scratch = Path(out) if out else Path(tempfile.mkdtemp(prefix="fedlns-verify-"))
    sweep(configs, scratch, progress=False, jobs=jobs)
    current = runfiles.code_identity()["source"]
    exact = close = 0
    for name, config in zip(names, configs):
        meta, expected = stored[name]
        actual = runfiles.read_records(scratch / config.run_name())
        same_code = (meta.get("code") or {}).get("source") == current
        difference = first_difference(expected, actual)
        print(f"{name}: {'same numbers' if difference is None else f'DIFFERENT: {difference}'} "
              f"({len(actual) - 1} rounds; archived code {'=' if same_code else '!='} this code)")
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
    loss = [abs(new["eval_loss"] - old["eval_loss"]) / abs(old["eval_loss"]) for old, new in pairs
            if old.get("eval_loss") is not None and new.get("eval_loss") is not None]
    decided = [(old, new) for old, new in pairs if "label" in old or "label" in new]
    flipped = sum(old.get("label") != new.get("label") for old, new in decided)

    def perplexities(records):   # best checkpoint and last 10 rounds, as the report reads them
        if not any(r["round"] >= 1 for r in records):
            return float("nan"), float("nan")
        return perplexity(finite_loss(best_checkpoint(records))), perplexity(last10_loss(records))

    (best_old, last_old), (best_new, last_new) = perplexities(expected), perplexities(actual)
    largest = max(abs(best_new - best_old) / best_old, abs(last_new - last_old) / last_old)
    text = (f"evaluation loss within {max(loss, default=0.0):.1e} (relative) over {len(pairs)} rounds; screening "
            f"labels differ in {flipped} of {len(decided)} rounds; best perplexity {best_old:.2f} -> {best_new:.2f}, "
            f"last-10 {last_old:.2f} -> {last_new:.2f}")
    return {"largest_loss_difference": max(loss, default=0.0), "label_rounds_differing": flipped,
            "largest_ppl_difference": largest if math.isfinite(largest) else float("inf"), "text": text}


def first_difference(expected: list[dict], actual: list[dict]) -> str | None:
    """The first recorded number that differs (wall times aside), or None."""
    if len(expected) != len(actual):
        return f"{len(expected)} records archived, {len(actual)} re-run"
    for old, new in zip(expected, actual):
        for key in sorted(set(old) | set(new)):
            if key in TIMINGS:
                continue
            if old.get(key) != new.get(key):
                return f"round {old.get('round')}: {key} was {old.get(key)!r}, now {new.get(key)!r}"
    return None
