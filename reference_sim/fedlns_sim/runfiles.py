"""The files of a run, and nothing else: config record, per-round records, state and checkpoints.

No torch here, so the report can read run folders anywhere::

    <out>/<config.run_name()>/
        config.json      the resolved config, data source, references, malicious set and the code that ran
        rounds.jsonl     one JSON object per round (round 0 = the initial model)
        state.json       {"round": t, "checkpoint": "checkpoint-000t"}
        checkpoint-000t/ global.npz (+ the FedLNS screener state)

Every write is atomic (temporary file, fsync, rename), so a kill at any moment leaves the previous state.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from .config import LEGACY, Config, experiment_fields

# Source packages whose code decides a run's numbers; the simulator's reporting modules (and the report package)
# read run files and never change a number in them, so editing them does not make earlier runs "other code".
_CODE_PACKAGES = ("fedlns_core", "fedlns_torch", "fedlns_sim")
_READS_RUN_FILES_ONLY = {"fedlns_sim": ("archive.py", "cli.py", "report", "runstore.py", "sweep.py")}


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part."""
    temporary = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # left only when the write failed


def save_npz(path: Path, arrays: dict) -> None:
    """``np.savez`` written atomically."""
    temporary = path.with_name(path.name + f".tmp{os.getpid()}.npz")
    with open(temporary, "wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def json_ready(value):
    """NaN/inf become None, numpy scalars become Python numbers, keys become strings."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value


# ------------------------------------------------------------------------------------------ provenance


def code_identity() -> dict:
    """Which code runs: the package version, the git commit of the checkout (if any) and a hash of the source.

    ``source`` hashes the ``.py`` files that decide a run's numbers (all of fedlns_core and fedlns_torch, the
    simulator without its reporting modules), so it identifies that code exactly, also in an installed copy or a
    checkout with uncommitted changes (then ``dirty`` is true).
    """
    import importlib

    digest = hashlib.sha256()
    roots = []
    for name in _CODE_PACKAGES:
        init = importlib.import_module(name).__file__
        assert init is not None, name  # regular packages (with an __init__.py), not namespace ones
        roots.append(Path(init).parent)
    for name, root in zip(_CODE_PACKAGES, roots):
        for path in sorted(root.rglob("*.py")):
            if path.relative_to(root).parts[0] in _READS_RUN_FILES_ONLY.get(name, ()):
                continue
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    commit, dirty = _git_state(roots)
    return {
        "version": importlib.import_module("fedlns_core").__version__,
        "commit": commit,
        "dirty": dirty,
        "source": digest.hexdigest()[:16],
    }


def _git_state(roots: list[Path]) -> tuple[str | None, bool | None]:
    """(commit, uncommitted changes under ``roots``) of the checkout holding them; (None, None) outside git."""

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(roots[0]), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=all", "--", *map(str, roots)))
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, dirty


# ------------------------------------------------------------------------------------------ records


def read_meta(run_dir: Path) -> dict | None:
    """The run's ``config.json``, or None when there is none yet."""
    path = Path(run_dir) / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def records_data(run_dir: Path) -> bytes:
    """The bytes of a run's ``rounds.jsonl`` (of its ``rounds.jsonl.gz`` in the folder layout of earlier archives),
    empty when it has neither."""
    path = Path(run_dir) / "rounds.jsonl"
    packed = path.with_name("rounds.jsonl.gz")
    if path.is_file():
        return path.read_bytes()
    if packed.is_file():
        return gzip.decompress(packed.read_bytes())
    return b""


def parse_records(data: bytes) -> list[dict]:
    """The records in the bytes of a ``rounds.jsonl``, one per line, up to the first incomplete line."""
    records = []
    for line in data.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut by a kill; it is recomputed on resume
    return records


def read_records(run_dir: Path) -> list[dict]:
    """The per-round records of a run (only complete lines), from ``rounds.jsonl`` or an archived
    ``rounds.jsonl.gz``."""
    return parse_records(records_data(run_dir))


def append_record(run_dir: Path, record: dict) -> None:
    """Append one round's record and fsync it."""
    with open(Path(run_dir) / "rounds.jsonl", "a") as handle:
        handle.write(json.dumps(json_ready(record)) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def keep_records_until(run_dir: Path, last_round: int) -> list[dict]:
    """Drop records after ``last_round`` (a resumed run recomputes them); returns the ones kept."""
    records = [r for r in read_records(run_dir) if r["round"] <= last_round]
    atomic_write(Path(run_dir) / "rounds.jsonl", "".join(json.dumps(r) + "\n" for r in records).encode())
    return records


# ------------------------------------------------------------------------------------------ config and state


@functools.cache
def _filled_defaults() -> dict:
    """Every setting at the value a stored config that predates it ran with: LEGACY's, else the default."""
    return {**Config().to_dict(), **LEGACY}


def stored_config(values: dict) -> dict:
    """A stored run's config with every setting: one it predates takes its value then (LEGACY), else its default."""
    return {**_filled_defaults(), **values}


def experiment_key(config_dict: dict) -> str:
    """The experiment of a complete config dict (a stored one through :func:`stored_config` first) as one string:
    equal for two configs exactly when they describe the same run, whatever their folders' names."""
    return json.dumps(experiment_fields(config_dict), sort_keys=True)


def finished_experiments(out: Path) -> set[str]:
    """The experiments (:func:`experiment_key`) of the finished runs in ``out``, by their stored configs.

    A sweep skips a run whose folder is finished; this also finds the same run under another name, e.g. one made
    when run names hashed every setting of the experiment (before LEGACY), so that such runs are not made again.
    """
    found = set()
    for run_dir in Path(out).iterdir() if Path(out).is_dir() else ():
        meta = read_meta(run_dir) if run_dir.is_dir() else None
        config_dict = stored_config(meta["config"]) if meta is not None else None
        if config_dict is not None and is_finished(run_dir, int(config_dict["rounds"])):
            found.add(experiment_key(config_dict))
    return found


def check_same_run(run_dir: Path, config_dict: dict, data_source: str | None = None) -> None:
    """Raise if ``run_dir`` holds a run of another config (or, given ``data_source``, of other data)."""
    stored = read_meta(run_dir)
    if stored is None:
        return
    previous = stored_config(stored["config"])
    if experiment_fields(previous) != experiment_fields(config_dict):
        changed = sorted(k for k in experiment_fields(config_dict) if previous.get(k) != config_dict.get(k))
        raise RuntimeError(
            f"{run_dir} holds a run with a different config ({', '.join(changed) or 'keys'}); use another --out"
        )
    if data_source is not None and stored.get("data_source") != data_source:
        raise RuntimeError(
            f"{run_dir} was run on {stored.get('data_source')!r}, now the data is {data_source!r}; use another --out"
        )


def completed_round(run_dir: Path) -> int:
    """The last completed round (0 when none)."""
    state = Path(run_dir) / "state.json"
    return json.loads(state.read_text())["round"] if state.is_file() else 0


def is_finished(run_dir: Path, rounds: int) -> bool:
    """Whether the run in ``run_dir`` completed ``rounds`` rounds (an archived run, records only, counts too)."""
    if (Path(run_dir) / "state.json").is_file():
        return completed_round(run_dir) >= rounds
    records = read_records(run_dir) if (Path(run_dir) / "rounds.jsonl.gz").is_file() else []
    return bool(records) and records[-1]["round"] >= rounds


def checkpoint_dir(run_dir: Path) -> Path | None:
    """The folder of the last completed round's checkpoint, or None."""
    state = Path(run_dir) / "state.json"
    return Path(run_dir) / json.loads(state.read_text())["checkpoint"] if state.is_file() else None


def save_state(run_dir: Path, t: int, global_params: dict, screener) -> None:
    """Write round t's checkpoint folder, then point state.json at it (atomic), then drop older ones."""
    name = f"checkpoint-{t:04d}"
    folder = Path(run_dir) / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    save_npz(folder / "global.npz", global_params)
    if screener is not None:
        screener.save(folder / "screener")
    atomic_write(Path(run_dir) / "state.json", json.dumps({"round": t, "checkpoint": name}).encode())
    for old in Path(run_dir).glob("checkpoint-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
