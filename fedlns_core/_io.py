"""Atomic, pickle-free state files: one ``.npz`` holding arrays plus a JSON header."""

from __future__ import annotations

import glob
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ._types import escape_text

_HEADER = "__fedlns_header__"
_TEMP_SUFFIX = ".tmp"
_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def write_state(path, kind: str, header: dict, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` and a JSON ``header`` to ``path`` atomically (temp file, fsync, rename).

    Temporary files left by an earlier save of the same path that was killed midway are removed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": "fedlns-core", "kind": kind, "version": 1, **header}, allow_nan=False)
    payload: dict[str, Any] = {_HEADER: np.array(text)}  # Any: savez(**payload) takes no allow_pickle key
    for name, array in arrays.items():
        if name == _HEADER:
            raise ValueError(f"array name {_HEADER!r} is reserved")
        payload[name] = np.asarray(array)
    _remove_orphans(path)
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TEMP_SUFFIX, dir=path.parent)
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


def _remove_orphans(path: Path) -> None:
    """Delete ``.<name>.*.tmp`` files of ``path``: what a save killed before its rename leaves."""
    for orphan in path.parent.glob(f".{glob.escape(path.name)}.*{_TEMP_SUFFIX}"):
        try:
            orphan.unlink()
        except OSError:
            pass


ExpectedArrays = Callable[[dict], Mapping[str, tuple[tuple[int, ...], np.dtype]]]


def read_state(path, kind: str, expected_arrays: ExpectedArrays) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a file written by :func:`write_state`; ``ValueError`` when it is corrupt or foreign.

    ``expected_arrays(header)`` names the arrays the header announces, with shape and dtype. Nothing
    else is read: the archive must hold exactly those members plus the header, each stored
    uncompressed (as ``np.savez`` writes them) and no larger than the file itself, so reading never
    decompresses or allocates more than the file's size. Whatever goes wrong (a bad zip, bad JSON,
    deep nesting, huge numbers, wrong types) is raised as ``ValueError``; only a missing file raises
    ``FileNotFoundError``.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}
            header = _parse_header(_read_member(archive, members, _HEADER, size, None), path, kind)
            expected = dict(expected_arrays(header))
            unexpected = sorted(set(members) - {f"{name}.npy" for name in expected} - {f"{_HEADER}.npy"})
            if unexpected:
                raise ValueError(
                    f"unexpected member{'s' if len(unexpected) > 1 else ''} "
                    f"{', '.join(repr(name) for name in unexpected[:3])}"
                )
            arrays = {name: _read_member(archive, members, name, size, spec) for name, spec in expected.items()}
    except FileNotFoundError:
        raise
    except _NotOurs as error:
        raise ValueError(f"{path}: {error}") from None
    except (
        zipfile.BadZipFile,
        OSError,
        EOFError,
        KeyError,
        ValueError,
        TypeError,
        OverflowError,
        RecursionError,
        MemoryError,
        IndexError,
        AttributeError,
        UnicodeError,
        SyntaxError,
    ) as error:
        raise ValueError(
            f"{path}: corrupt or unreadable fedlns-core state file ({type(error).__name__}: {str(error)[:200]})"
        ) from None
    return header, arrays


class _NotOurs(Exception):
    """A readable file that is not (or not this kind of) fedlns-core state."""


def _read_member(archive: zipfile.ZipFile, members: dict, name: str, size: int, spec) -> np.ndarray:
    info = members.get(f"{name}.npy")
    if info is None:
        if name == _HEADER:
            raise _NotOurs("not a fedlns-core state file (no header)")
        raise ValueError(f"array {name!r} is missing")
    if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
        raise ValueError(f"member {info.filename!r} is compressed or larger than the file")
    with archive.open(info) as stream:
        version = np.lib.format.read_magic(stream)
        if version not in _NPY_HEADER_READERS:
            raise ValueError(f"array {name!r} has unsupported .npy version {version}")
        shape, fortran, dtype = _NPY_HEADER_READERS[version](stream)  # reads the header only
        if name == _HEADER:
            if dtype.kind != "U" or shape != ():
                raise ValueError("header is not a text scalar")
        elif (tuple(shape), dtype) != (tuple(spec[0]), np.dtype(spec[1])):
            raise ValueError(
                f"array {name!r} has shape {shape} and dtype {dtype}, expected {tuple(spec[0])} and {np.dtype(spec[1])}"
            )
        count = int(np.prod(shape, dtype=object))
        if count * dtype.itemsize > info.file_size:
            raise ValueError(f"array {name!r} is truncated")
        data = np.frombuffer(stream.read(count * dtype.itemsize), dtype=dtype, count=count)
        return data.reshape(shape, order="F" if fortran else "C").copy()


def _parse_header(array: np.ndarray, path: Path, kind: str) -> dict:
    try:
        header = json.loads(str(array[()]))
    except json.JSONDecodeError as error:
        raise ValueError(f"header is not JSON ({error})") from None
    if not isinstance(header, dict) or header.get("format") != "fedlns-core":
        raise _NotOurs("not a fedlns-core state file")
    if header.get("kind") != kind:
        raise _NotOurs(f"holds a {escape_text(repr(header.get('kind')), 60)} state, expected {kind!r}")
    if header.get("version") != 1:
        raise _NotOurs(f"unsupported state version {escape_text(repr(header.get('version')), 60)}")
    return header


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
