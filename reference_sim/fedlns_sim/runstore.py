"""Finished runs kept compactly: one xz-compressed tar per results folder, read where it lies.

An archive (``runs.tar.xz``) holds a runs folder's files without checkpoints, ``<run name>/config.json``,
``<run name>/rounds.jsonl`` and ``<run name>/state.json`` per run, so ``tar -xJf runs.tar.xz -C RUNS`` gives run
folders that a sweep counts as finished. One xz stream over every run stores what the runs repeat (configs,
record keys) once: the archived results took 41% of the bytes of the same runs as one gzip-compressed file each,
and one file per results folder instead of three per run.

It is written whole, to a temporary file renamed over the old one (a write cut short leaves the old archive), and
deterministically (no times, owners or modes of this machine). The runs it held come first, in their order, and
new runs after them, so the grown archive's compressed bytes repeat the old one's up to its last few kilobytes and
git stores the new runs only.

Readers take a runs folder, an archive or a results folder holding one (:func:`stored_runs`); the folder layout
of earlier archives (``runs/<run name>/rounds.jsonl.gz``) is a runs folder like any other.
"""

from __future__ import annotations

import io
import lzma
import tarfile
from collections.abc import Iterator
from pathlib import Path

from .runfiles import atomic_write, records_data

ARCHIVE = "runs.tar.xz"
_SUFFIX = ".tar.xz"
# 7% smaller than xz's default preset on the attack matrix's runs, for 1.5 times its writing time; read as fast
_PRESET = 9 | lzma.PRESET_EXTREME


def archive_path(source: str | Path) -> Path | None:
    """The archive that ``source`` names: itself when it is a file, a results folder's ``runs.tar.xz``, or None
    (a runs folder).

    Raises ``ValueError`` for a results folder that holds run folders beside its archive (archived by an earlier
    version into ``runs/``): read as the archive alone, they would be left out without a word.
    """
    source = Path(source)
    if source.is_file():
        return source
    if not (source / ARCHIVE).is_file():
        return None
    if any(source.rglob("config.json")):
        raise ValueError(
            f"{source} holds run folders beside its {ARCHIVE}: add them to it (fedlns-sim archive "
            f"{source / 'runs'} {source}), then remove them"
        )
    return source / ARCHIVE


def source_name(source: str | Path) -> str:
    """How a report names where its runs came from: a runs folder's name, an archive's without ``.tar.xz``."""
    path = archive_path(source) or Path(source)
    return path.name.removesuffix(_SUFFIX)


def stored_runs(source: str | Path) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Every run under ``source``, by run name: ``(name, {file name: bytes})``.

    Parameters
    ----------
    source : str or Path
        An archive, a results folder holding ``runs.tar.xz``, or a runs folder (every folder under it with a
        ``config.json``, whose ``rounds.jsonl`` is read from ``rounds.jsonl.gz`` when it has only that).

    Yields
    ------
    tuple of (str, dict)
        The run's name and its ``config.json``, ``rounds.jsonl`` and (where there is one) ``state.json``, in the
        order of the names (an archive's too, however it grew).
    """
    if not Path(source).exists():  # a path of the folder layout, say: never an empty result
        raise FileNotFoundError(f"no finished run under {source} (no such folder or archive)")
    archive = archive_path(source)
    if archive is not None:
        yield from sorted(read_archive(archive).items())
        return
    for config_path in sorted(Path(source).rglob("config.json")):
        yield config_path.parent.name, _folder_files(config_path.parent)


def run_names(source: str | Path) -> list[str]:
    """The names of the runs under ``source`` (as :func:`stored_runs`), without reading their records."""
    archive = archive_path(source)
    if archive is None:
        return sorted(path.parent.name for path in Path(source).rglob("config.json"))
    with tarfile.open(archive, "r:xz") as tar:
        return sorted({name.partition("/")[0] for name in tar.getnames() if "/" in name})


def _folder_files(folder: Path) -> dict[str, bytes]:
    """A run folder's files as an archive holds them (checkpoints left out)."""
    files = {"config.json": (folder / "config.json").read_bytes(), "rounds.jsonl": records_data(folder)}
    if (folder / "state.json").is_file():
        files["state.json"] = (folder / "state.json").read_bytes()
    return files


def read_archive(path: str | Path) -> dict[str, dict[str, bytes]]:
    """Run name -> {file name: bytes} of every run in the archive at ``path``, in the archive's order."""
    runs: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path, "r:xz") as tar:
        for member in tar:
            if member.isfile():
                run, _, file_name = member.name.partition("/")
                handle = tar.extractfile(member)
                assert handle is not None  # None only for members that are not regular files
                runs.setdefault(run, {})[file_name] = handle.read()
    return runs


def write_archive(path: str | Path, runs: dict[str, dict[str, bytes]]) -> None:
    """Write ``runs`` (run name -> {file name: bytes}, in the order to keep) to the archive at ``path``, atomically.

    The same runs in the same order give the same bytes: members carry no time, owner or mode of this machine.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=_PRESET) as tar:  # type: ignore[call-overload]  # typeshed: preset 0-9, no EXTREME flag
        for run, files in runs.items():
            for file_name, data in files.items():
                member = tarfile.TarInfo(f"{run}/{file_name}")  # mtime 0, owner 0, mode 0o644
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
    atomic_write(Path(path), buffer.getvalue())
