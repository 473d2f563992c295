"""What every framework adapter needs around a screener: resume it, save it each round, log decisions.

Framework-free, so the Flower and FedML adapters share it without importing each other's framework.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._screening import FedLNS


class ScreeningJournal:
    """Resume a screener from ``state_path``, save it after every round, append decisions to ``log_path``.

    Parameters
    ----------
    state_path : str or os.PathLike, optional
        Where :meth:`record` saves the screener (``FedLNS.save``: atomic, no pickle) and where
        :meth:`resume` loads it from.
    log_path : str or os.PathLike, optional
        A JSON-lines file; :meth:`record` appends one line per round. Lines are strict JSON written
        ASCII-only, so client-written text can never start a line of its own (newlines, control and
        line-separator characters are escaped).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> journal = ScreeningJournal(state_path=folder / "state.npz", log_path=folder / "log.jsonl")
    >>> screener = journal.resume(FedLNS(activation_threshold=5))    # nothing saved yet: this one
    >>> journal.record(screener, {"round": 0, "reason": "line one\\nforged line"})
    >>> (folder / "log.jsonl").read_text().count("\\n"), journal.resume(FedLNS()).activation_threshold
    (1, 5)
    """

    def __init__(
        self, *, state_path: str | os.PathLike | None = None, log_path: str | os.PathLike | None = None
    ) -> None:
        self.state_path = _checked_path("state_path", state_path)
        self.log_path = _checked_path("log_path", log_path)

    def resume(self, screener: FedLNS) -> FedLNS:
        """The screener saved at ``state_path`` if there is one, else ``screener``."""
        if not isinstance(screener, FedLNS):
            raise TypeError(f"screener must be a fedlns_core.FedLNS, got {type(screener).__name__}")
        if self.state_path is not None and self.state_path.exists():
            return FedLNS.load(self.state_path)
        return screener

    def record(self, screener: FedLNS | None, entry: Mapping[str, Any]) -> None:
        """Save ``screener`` (when given and ``state_path`` is set) and append ``entry`` as a JSON line."""
        line = json.dumps(entry, ensure_ascii=True, allow_nan=False) + "\n"  # fails before any write
        if screener is not None and self.state_path is not None:
            screener.save(self.state_path)
        if self.log_path is not None:
            with open(self.log_path, "a", encoding="ascii") as handle:
                handle.write(line)

    def __repr__(self) -> str:
        return f"ScreeningJournal(state_path={self.state_path}, log_path={self.log_path})"


def _checked_path(name: str, value) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str, an os.PathLike or None, got {type(value).__name__}")
    path = Path(value)
    if path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a directory, expected a file path")
    return path
