"""Atomic, pickle-free state files: one ``.npz`` holding arrays plus a JSON header."""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

_HEADER = "__fedlns_header__"


def write_state(path, kind: str, header: dict, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` and a JSON ``header`` to ``path`` atomically (temp file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {_HEADER: np.array(json.dumps({"format": "fedlns-core", "kind": kind, "version": 1, **header}))}
    for name, array in arrays.items():
        if name == _HEADER:
            raise ValueError(f"array name {_HEADER!r} is reserved")
        payload[name] = np.asarray(array)
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            np.savez(stream, **payload)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, path)
    except BaseException:
        try:
            os.unlink(temp_name)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(path.parent)
    return path


def read_state(path, kind: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a file written by :func:`write_state`; ``ValueError`` when it is corrupt or foreign."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            header_text = str(archive[_HEADER][()]) if _HEADER in archive.files else None
            arrays = {name: archive[name] for name in archive.files if name != _HEADER}
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, ValueError) as error:
        raise ValueError(f"{path}: corrupt or unreadable fedlns-core state file ({error})") from error
    if header_text is None:
        raise ValueError(f"{path}: not a fedlns-core state file (no header)")
    try:
        header = json.loads(header_text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: corrupt or unreadable fedlns-core state file ({error})") from error
    if not isinstance(header, dict) or header.get("format") != "fedlns-core":
        raise ValueError(f"{path}: not a fedlns-core state file")
    if header.get("kind") != kind:
        raise ValueError(f"{path}: holds a {header.get('kind')!r} state, expected {kind!r}")
    if header.get("version") != 1:
        raise ValueError(f"{path}: unsupported state version {header.get('version')!r}")
    return header, arrays


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; not possible (nor needed) on every platform.
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
