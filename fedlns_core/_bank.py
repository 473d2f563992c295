"""The server-side history bank: the latest signature per client id (eqs. bank_index, bank_refresh)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._io import read_state, write_state
from ._robust import median_mad, median_mad_blocks
from ._settings import validate_settings
from ._types import ClientId, check_client_id, id_sort_key

_BANK_SETTINGS = ("ema", "max_clients", "random_state")
_COMMIT_ROWS = 4096  # rows per block of a commit's column writes (measured: 4x faster than whole columns)


@dataclass
class Refresh:
    """A bank refresh (eq. ``bank_refresh``) computed but not applied: :meth:`HistoryBank.commit` applies it.

    Nothing in the bank changes until then, so a round that fails after staging leaves it untouched.
    """

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    slots: dict  # id -> column, after the refresh
    writes: dict  # column -> new (D,) values
    seen: set  # ids offered, after the refresh (reservoir mode)
    entropy: np.random.Generator | None = None  # the unseeded generator after its draws (reservoir, no seed)
    n_columns: int = 0  # columns in use after the refresh
    base: np.ndarray = field(default=None, repr=False)  # type: ignore[arg-type]  # (D, columns in use) before the refresh; stage() always sets it
    dtype: np.dtype = np.dtype(np.float64)  # storage after the refresh (see HistoryBank)

    def __len__(self) -> int:
        return len(self.slots)

    def columns(self) -> np.ndarray:
        """The bank's (D, n) signatures after the refresh, as a new array."""
        return self._block(slice(0, self.base.shape[0]))

    def _block(self, rows: slice, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``rows`` of :meth:`columns`, written into ``out`` (a new array by default)."""
        kept = min(self.n_columns, self.base.shape[1])
        if out is None:
            out = np.empty((rows.stop - rows.start, self.n_columns), dtype=self.dtype)
        out[:, :kept] = self.base[rows, :kept]
        for slot, values in self.writes.items():
            out[:, slot] = values[rows]
        return out

    def reference(self, mad_floor: float, rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Median and floored MAD of the refreshed bank (eqs. ``bank_median`` to ``bank_mad``), read block by
        block without building the refreshed (D, n) array; of its first ``rows`` rows only, if given (the
        signature, without the entries the sketching rules bank after it)."""
        n_rows = self.base.shape[0] if rows is None else rows
        return median_mad_blocks(self._block, n_rows, self.n_columns, mad_floor, dtype=self.dtype)


class HistoryBank:
    """Latest normalization signature of every client seen so far.

    A participating client's entry is replaced by its new signature; absent clients keep theirs
    (eqs. ``bank_index``, ``bank_refresh``). Signatures are stored as the columns of one contiguous
    (D, capacity) array, so the coordinate-wise median/MAD over the bank is a row-wise sort. The array is
    float32 while every stored value is exactly a float32 (the usual case: the signature of a float32 or
    bfloat16 model is a difference of two float32 values of similar size) and float64 from the first value
    that is not; either way it holds the exact float64 signatures, so every statistic is the same, at
    half the memory and sorting time in the float32 case.

    Parameters
    ----------
    ema : float in [0, 1), default=0.0
        Coefficient beta of an optional exponential moving average: a returning client's entry becomes
        ``beta * old + (1 - beta) * new``. The paper uses 0 (latest replacement).
    max_clients : int, optional
        Bound on the number of stored identities. When set, the bank keeps a uniform random reservoir
        (Vitter's algorithm R over distinct ids) of at most ``max_clients`` clients; an id that was not
        admitted is ignored from then on, and an admitted id may later be evicted by a newcomer.
        The reservoir is a uniform subset of the ids seen, so the number of malicious ids in it is
        hypergeometric exactly as in the paper's analysis (appendix ``app:min_bank_probability``) with
        bank size ``b = max_clients``: the chance of a malicious majority decays like
        ``exp(-b * KL(1/2 || alpha))``. The price is a reference built from fewer clients than were
        seen (noisier median/MAD), and memory ``O(max_clients * D)`` plus ``O(K)`` for the seen ids.
    random_state : int, optional
        Seed for the reservoir's choices (only used with ``max_clients``). Each choice is derived from
        the seed and the number of ids seen, so a saved and reloaded bank makes the same choices.

    Examples
    --------
    >>> bank = HistoryBank()
    >>> bank.update({"a": {"ln.weight": np.array([0.0, 1.0])}, 7: {"ln.weight": np.array([2.0, 3.0])}})
    >>> len(bank), "a" in bank, bank.ids
    (2, True, (7, 'a'))
    >>> median, mad = bank.reference(mad_floor=1e-6)
    >>> median["ln.weight"], mad["ln.weight"]
    (array([1., 2.]), array([1., 1.]))
    """

    def __init__(self, *, ema: float = 0.0, max_clients: int | None = None, random_state: int | None = None):
        self.ema = ema
        self.max_clients = max_clients
        self.random_state = random_state
        self._keys: tuple[str, ...] | None = None
        self._shapes: tuple[tuple[int, ...], ...] | None = None
        self._columns = np.empty((0, 0))  # (D, capacity)
        self._slots: dict[ClientId, int] = {}  # id -> column
        self._by_slot: list[ClientId] = []  # column -> id (reservoir evicts by column: O(1))
        self._seen: set[ClientId] = set()  # distinct ids offered (reservoir mode only)
        self._entropy: np.random.Generator | None = None

    # ----------------------------------------------------------------------------------------- queries
    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, client_id) -> bool:
        return client_id in self._slots

    @property
    def ids(self) -> tuple[ClientId, ...]:
        """Stored client ids, ints first then strs, each ascending."""
        return tuple(sorted(self._slots, key=id_sort_key))

    @property
    def keys(self) -> tuple[str, ...]:
        """The signature's parameter names (empty before the first update)."""
        return self._keys or ()

    @property
    def n_features(self) -> int:
        """D, the signature length (eq. ``feature_dim``)."""
        return self._columns.shape[0]

    @property
    def n_seen(self) -> int:
        """Distinct ids ever offered to the bank (equals ``len`` without ``max_clients``)."""
        return len(self._seen) if self.max_clients is not None else len(self._slots)

    def __getitem__(self, client_id) -> dict[str, np.ndarray]:
        """The stored signature of ``client_id``, as a dict of arrays (copies)."""
        column = self._columns[:, self._slots[client_id]]
        return self._unflatten(column)

    def reference(self, mad_floor: float = 1e-6) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Coordinate-wise bank median and floored MAD per key (eqs. ``bank_median`` to ``bank_mad``)."""
        median, mad = self.reference_flat(mad_floor)
        return self._unflatten(median), self._unflatten(mad)

    def reference_flat(self, mad_floor: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`reference`, concatenated in ``keys`` order: two arrays of shape (D,)."""
        if not self._slots:
            raise ValueError("the history bank is empty: no reference can be computed")
        return median_mad(self._columns[:, : len(self._slots)], mad_floor)

    # ----------------------------------------------------------------------------------------- updates
    def update(self, signatures: Mapping[ClientId, Mapping[str, np.ndarray]]) -> None:
        """Refresh the bank with this round's signatures (eq. ``bank_refresh``).

        Every signature must have the same keys and shapes as the bank's earlier entries.
        """
        if not signatures:
            return
        items = [(check_client_id(cid), sig) for cid, sig in signatures.items()]
        first = items[0][1]
        keys = tuple(sorted(first)) if self._keys is None else self._keys
        shapes = tuple(np.shape(first[key]) for key in keys) if self._shapes is None else self._shapes
        rows = np.empty((len(items), sum(int(np.prod(shape)) for shape in shapes)))
        for row, (client_id, signature) in zip(rows, items):
            if set(signature) != set(keys):
                raise ValueError(
                    f"client {client_id!r}: signature keys {sorted(signature)} differ from the bank's {list(keys)}"
                )
            offset = 0
            for key, shape in zip(keys, shapes):
                value = np.asarray(signature[key], dtype=np.float64)
                if value.shape != shape:
                    raise ValueError(
                        f"client {client_id!r}: signature key {key!r} has shape {value.shape}, expected {shape}"
                    )
                row[offset : offset + value.size] = value.ravel()
                offset += value.size
        self.update_flat([client_id for client_id, _ in items], rows, keys, shapes)

    def update_flat(
        self, client_ids: Sequence[ClientId], rows: np.ndarray, keys: Sequence[str], shapes: Sequence[tuple[int, ...]]
    ) -> None:
        """Refresh from already-flattened signatures: ``rows`` is (N, D) in ``keys`` order."""
        self.commit(self.stage(client_ids, rows, keys, shapes))

    def stage(
        self, client_ids: Sequence[ClientId], rows: np.ndarray, keys: Sequence[str], shapes: Sequence[tuple[int, ...]]
    ) -> Refresh:
        """Compute the refresh by ``rows`` ((N, D), ``keys`` order) without changing the bank."""
        settings = self._settings()
        keys, shapes = tuple(keys), tuple(tuple(int(n) for n in shape) for shape in shapes)
        width = sum(int(np.prod(shape)) for shape in shapes)
        if self._keys is not None and (keys, shapes) != (self._keys, self._shapes):
            raise ValueError(
                f"signature layout {list(zip(keys, shapes))} differs from the bank's "
                f"{list(zip(self._keys, self._shapes or ()))}"
            )
        rows = np.asarray(rows, dtype=np.float64)
        if rows.shape != (len(client_ids), width):
            raise ValueError(f"rows has shape {rows.shape}, expected {(len(client_ids), width)}")
        ids = [check_client_id(client_id) for client_id in client_ids]
        if len(set(ids)) != len(ids):
            raise ValueError("client ids must be distinct within one refresh")
        # the columns in use (a view): the array's spare capacity beyond them is uninitialised memory
        base = self._columns[:, : len(self._slots)] if self._keys is not None else np.empty((width, 0))
        refresh = Refresh(
            keys, shapes, dict(self._slots), {}, set(self._seen), copy.deepcopy(self._entropy), len(self._slots), base
        )
        by_slot = list(self._by_slot)
        ema, max_clients = settings["ema"], settings["max_clients"]
        for index in sorted(range(len(ids)), key=lambda i: id_sort_key(ids[i])):
            client_id = ids[index]
            slot = refresh.slots.get(client_id)
            if slot is None:
                slot = self._admit(client_id, refresh, by_slot, max_clients, settings["random_state"])
                if slot is None:
                    continue
                refresh.writes[slot] = rows[index].copy()
            elif ema:
                previous = refresh.writes.get(slot, base[:, slot])
                refresh.writes[slot] = ema * previous + (1.0 - ema) * rows[index]
            else:
                refresh.writes[slot] = rows[index].copy()
        refresh.n_columns = len(refresh.slots)
        exact = base.dtype == np.float32 or not base.shape[1]
        refresh.dtype = np.dtype(np.float32 if exact and all(map(_is_float32, refresh.writes.values())) else np.float64)
        return refresh

    def commit(self, refresh: Refresh) -> None:
        """Apply a refresh made by :meth:`stage` on this bank's current state."""
        if self._keys is None:
            self._keys, self._shapes = refresh.keys, refresh.shapes
            self._columns = np.empty((sum(int(np.prod(shape)) for shape in refresh.shapes), 0), refresh.dtype)
        if refresh.n_columns > self._columns.shape[1] or refresh.dtype != self._columns.dtype:
            capacity = self._columns.shape[1]
            if refresh.n_columns > capacity:
                capacity = max(8, 2 * capacity, refresh.n_columns)
            grown = np.empty((self._columns.shape[0], capacity), refresh.dtype)
            grown[:, : len(self._slots)] = self._columns[:, : len(self._slots)]
            self._columns = grown
        # Column writes by blocks of rows, so the cache lines of a row block take all its writes at once.
        for start in range(0, self._columns.shape[0], _COMMIT_ROWS):
            block = self._columns[start : start + _COMMIT_ROWS]
            for slot, values in refresh.writes.items():
                block[:, slot] = values[start : start + _COMMIT_ROWS]
        self._slots = refresh.slots
        by_slot: list[Any] = [None] * len(refresh.slots)  # every column is filled just below
        for client_id, slot in refresh.slots.items():
            by_slot[slot] = client_id
        self._by_slot = by_slot
        self._seen = refresh.seen if self.max_clients is not None else set()
        self._entropy = refresh.entropy

    def _admit(self, client_id: ClientId, refresh: Refresh, by_slot: list, max_clients, random_state) -> int | None:
        """Column for a new id, or ``None`` when the reservoir declines it (O(1))."""
        if max_clients is not None:
            if client_id in refresh.seen:
                return None  # offered before and declined or evicted
            refresh.seen.add(client_id)
            if len(refresh.slots) >= max_clients:
                draw = self._draw(len(refresh.seen), refresh, random_state)
                if draw >= max_clients:
                    return None
                evicted = by_slot[draw]  # Algorithm R replaces the draw-th reservoir entry
                del refresh.slots[evicted]
                refresh.slots[client_id] = draw
                by_slot[draw] = client_id
                return draw
        slot = len(refresh.slots)
        refresh.slots[client_id] = slot
        by_slot.append(client_id)
        return slot

    @staticmethod
    def _draw(n_seen: int, refresh: Refresh, random_state) -> int:
        # Algorithm R: keep the n-th distinct id with probability max_clients / n.
        if random_state is None:
            if refresh.entropy is None:
                refresh.entropy = np.random.default_rng()
            return int(refresh.entropy.integers(n_seen))
        seed = np.random.SeedSequence([int(random_state), n_seen])
        return int(np.random.default_rng(seed).integers(n_seen))

    def _settings(self) -> dict:
        return validate_settings("HistoryBank", {name: getattr(self, name) for name in _BANK_SETTINGS})

    def _unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        out, offset = {}, 0
        for key, shape in zip(self._keys or (), self._shapes or ()):
            size = int(np.prod(shape))
            out[key] = flat[offset : offset + size].reshape(shape).astype(np.float64)
            offset += size
        return out

    # ------------------------------------------------------------------------------------- persistence
    def _state(self) -> tuple[dict, dict[str, np.ndarray]]:
        # Ids in column order, so that a loaded bank evicts exactly as this one would.
        ids = list(self._by_slot)
        header = {
            **self._settings(),
            "keys": None if self._keys is None else list(self._keys),
            "shapes": None if self._shapes is None else [list(shape) for shape in self._shapes],
            "ids": ids,
            "seen": sorted(self._seen, key=id_sort_key),
        }
        return header, {"bank_columns": self._columns[:, : len(ids)].astype(np.float64)}

    @staticmethod
    def _expected_arrays(header) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The one array a bank header announces, with its shape: read nothing else (see ``read_state``)."""
        if not isinstance(header, Mapping):
            raise ValueError("bank header is not an object")
        keys, shapes, ids = header.get("keys"), header.get("shapes"), header.get("ids")
        if not isinstance(ids, list):
            raise ValueError("bank ids must be a list")
        if keys is None:
            return {"bank_columns": ((0, 0), np.dtype(np.float64))} if not ids else _raise("ids without a layout")
        if not (
            isinstance(keys, list)
            and isinstance(shapes, list)
            and len(keys) == len(shapes)
            and all(isinstance(key, str) for key in keys)
            and all(isinstance(shape, list) and all(_count_like(n) for n in shape) for shape in shapes)
        ):
            raise ValueError("bank keys and shapes must be lists of equal length (str; lists of ints >= 0)")
        width = sum(int(np.prod(shape, dtype=object)) for shape in shapes)
        return {"bank_columns": ((width, len(ids)), np.dtype(np.float64))}

    @classmethod
    def _from_state(cls, header: dict, arrays: dict[str, np.ndarray], source) -> HistoryBank:
        try:
            settings = validate_settings("history-bank state", {name: header[name] for name in _BANK_SETTINGS})
            bank = cls(**settings)
            ids = [check_client_id(client_id) for client_id in header["ids"]]
            columns = arrays["bank_columns"]
            if header["keys"] is not None:
                bank._keys = tuple(header["keys"])
                bank._shapes = tuple(tuple(int(n) for n in shape) for shape in header["shapes"])
                if not np.isfinite(columns).all():
                    raise ValueError("bank array has non-finite values")
                exact = _is_float32(columns)
                bank._columns = np.array(columns, dtype=np.float32 if exact else np.float64, order="C")
            bank._slots = {client_id: slot for slot, client_id in enumerate(ids)}
            bank._by_slot = ids
            if len(bank._slots) != len(ids):
                raise ValueError("duplicate client ids")
            if not isinstance(header["seen"], list):
                raise ValueError("seen must be a list")
            bank._seen = {check_client_id(client_id) for client_id in header["seen"]}
            if settings["max_clients"] is not None and (
                len(ids) > settings["max_clients"] or not bank._seen >= set(ids)
            ):
                raise ValueError("reservoir holds more ids than max_clients, or ids it never saw")
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            raise ValueError(f"{source}: invalid history-bank state ({error})") from error
        return bank

    def save(self, path) -> None:
        """Write the bank to ``path`` (``.npz``; atomic; no pickle)."""
        header, arrays = self._state()
        write_state(path, "history-bank", {"bank": header}, arrays)

    @classmethod
    def load(cls, path) -> HistoryBank:
        """Read a bank written by :meth:`save`; ``ValueError`` for a corrupt or foreign file."""
        header, arrays = read_state(path, "history-bank", lambda h: cls._expected_arrays(h.get("bank")))
        return cls._from_state(header["bank"], arrays, path)

    def __repr__(self) -> str:
        return (
            f"HistoryBank(clients={len(self)}, n_features={self.n_features}, ema={self.ema}, "
            f"max_clients={self.max_clients})"
        )


def _is_float32(values: np.ndarray) -> bool:
    """True when every float64 value in ``values`` is exactly a float32 (so storing it as one loses nothing)."""
    with np.errstate(over="ignore"):
        return bool(np.array_equal(values.astype(np.float32), values))


def _count_like(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _raise(message: str):
    raise ValueError(message)
