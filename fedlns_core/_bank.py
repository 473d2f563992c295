"""The server-side history bank: the latest signature per client id (eqs. bank_index, bank_refresh)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ._io import read_state, write_state
from ._robust import median_mad
from ._types import ClientId, check_client_id, id_sort_key


class HistoryBank:
    """Latest normalization signature of every client seen so far.

    A participating client's entry is replaced by its new signature; absent clients keep theirs
    (eqs. ``bank_index``, ``bank_refresh``). Signatures are stored as the columns of one contiguous
    (D, capacity) float64 array, so the coordinate-wise median/MAD over the bank is a row-wise sort.

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
        self._columns = np.empty((0, 0))            # (D, capacity)
        self._slots: dict[ClientId, int] = {}       # id -> column
        self._seen: set[ClientId] = set()           # distinct ids offered (reservoir mode only)
        self._entropy = None

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
                raise ValueError(f"client {client_id!r}: signature keys {sorted(signature)} differ from "
                                 f"the bank's {list(keys)}")
            offset = 0
            for key, shape in zip(keys, shapes):
                value = np.asarray(signature[key], dtype=np.float64)
                if value.shape != shape:
                    raise ValueError(f"client {client_id!r}: signature key {key!r} has shape {value.shape}, "
                                     f"expected {shape}")
                row[offset: offset + value.size] = value.ravel()
                offset += value.size
        self.update_flat([client_id for client_id, _ in items], rows, keys, shapes)

    def update_flat(self, client_ids: Sequence[ClientId], rows: np.ndarray,
                    keys: Sequence[str], shapes: Sequence[tuple[int, ...]]) -> None:
        """Refresh from already-flattened signatures: ``rows`` is (N, D) in ``keys`` order."""
        self._check_params()
        keys, shapes = tuple(keys), tuple(tuple(shape) for shape in shapes)
        if self._keys is None:
            self._keys, self._shapes = keys, shapes
            self._columns = np.empty((rows.shape[1], 0))
        elif (keys, shapes) != (self._keys, self._shapes):
            raise ValueError(f"signature layout {list(zip(keys, shapes))} differs from the bank's "
                             f"{list(zip(self._keys, self._shapes))}")
        if rows.shape != (len(client_ids), self._columns.shape[0]):
            raise ValueError(f"rows has shape {rows.shape}, expected {(len(client_ids), self._columns.shape[0])}")
        order = sorted(range(len(client_ids)), key=lambda i: id_sort_key(client_ids[i]))
        for index in order:
            client_id = check_client_id(client_ids[index])
            slot = self._slots.get(client_id)
            if slot is None:
                slot = self._admit(client_id)
                if slot is None:
                    continue
                self._columns[:, slot] = rows[index]
            elif self.ema:
                column = self._columns[:, slot]
                column *= self.ema
                column += (1.0 - self.ema) * rows[index]
            else:
                self._columns[:, slot] = rows[index]

    def _admit(self, client_id: ClientId) -> int | None:
        """Column for a new id, or ``None`` when the reservoir declines it."""
        if self.max_clients is not None:
            if client_id in self._seen:
                return None                     # offered before and declined or evicted
            self._seen.add(client_id)
            if len(self._slots) >= self.max_clients:
                draw = self._draw(len(self._seen))
                if draw >= self.max_clients:
                    return None
                evicted = sorted(self._slots, key=id_sort_key)[draw]
                slot = self._slots.pop(evicted)
                self._slots[client_id] = slot
                return slot
        slot = len(self._slots)
        if slot == self._columns.shape[1]:
            grown = np.empty((self._columns.shape[0], max(8, 2 * slot)))
            grown[:, :slot] = self._columns
            self._columns = grown
        self._slots[client_id] = slot
        return slot

    def _draw(self, n_seen: int) -> int:
        # Algorithm R: keep the n-th distinct id with probability max_clients / n.
        if self.random_state is None:
            if self._entropy is None:
                self._entropy = np.random.default_rng()
            return int(self._entropy.integers(n_seen))
        seed = np.random.SeedSequence([int(self.random_state), n_seen])
        return int(np.random.default_rng(seed).integers(n_seen))

    def _check_params(self) -> None:
        if not (isinstance(self.ema, (int, float)) and 0.0 <= self.ema < 1.0):
            raise ValueError(f"ema must be in [0, 1), got {self.ema!r}")
        if self.max_clients is not None and not (isinstance(self.max_clients, int) and self.max_clients >= 1):
            raise ValueError(f"max_clients must be a positive int or None, got {self.max_clients!r}")
        if self.random_state is not None and not isinstance(self.random_state, int):
            raise TypeError(f"random_state must be an int or None, got {type(self.random_state).__name__}")

    def _unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        out, offset = {}, 0
        for key, shape in zip(self._keys or (), self._shapes or ()):
            size = int(np.prod(shape))
            out[key] = flat[offset: offset + size].reshape(shape).copy()
            offset += size
        return out

    # ------------------------------------------------------------------------------------- persistence
    def _state(self) -> tuple[dict, dict[str, np.ndarray]]:
        ids = sorted(self._slots, key=id_sort_key)
        header = {
            "ema": self.ema, "max_clients": self.max_clients, "random_state": self.random_state,
            "keys": None if self._keys is None else list(self._keys),
            "shapes": None if self._shapes is None else [list(shape) for shape in self._shapes],
            "ids": ids, "seen": sorted(self._seen, key=id_sort_key),
        }
        columns = self._columns[:, [self._slots[client_id] for client_id in ids]]
        return header, {"bank_columns": columns}

    @classmethod
    def _from_state(cls, header: dict, arrays: dict[str, np.ndarray], source) -> "HistoryBank":
        try:
            bank = cls(ema=header["ema"], max_clients=header["max_clients"], random_state=header["random_state"])
            bank._check_params()
            ids = [check_client_id(client_id) for client_id in header["ids"]]
            columns = np.asarray(arrays["bank_columns"], dtype=np.float64)
            if header["keys"] is not None:
                bank._keys = tuple(header["keys"])
                bank._shapes = tuple(tuple(int(n) for n in shape) for shape in header["shapes"])
                width = sum(int(np.prod(shape)) for shape in bank._shapes)
                if columns.shape != (width, len(ids)) or len(bank._keys) != len(bank._shapes):
                    raise ValueError(f"bank array has shape {columns.shape}, expected {(width, len(ids))}")
                if not np.isfinite(columns).all():
                    raise ValueError("bank array has non-finite values")
                bank._columns = np.array(columns, order="C")
            elif ids:
                raise ValueError("bank has ids but no signature layout")
            bank._slots = {client_id: slot for slot, client_id in enumerate(ids)}
            if len(bank._slots) != len(ids):
                raise ValueError("duplicate client ids")
            bank._seen = {check_client_id(client_id) for client_id in header["seen"]}
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{source}: invalid history-bank state ({error})") from error
        return bank

    def save(self, path) -> None:
        """Write the bank to ``path`` (``.npz``; atomic; no pickle)."""
        header, arrays = self._state()
        write_state(path, "history-bank", {"bank": header}, arrays)

    @classmethod
    def load(cls, path) -> "HistoryBank":
        """Read a bank written by :meth:`save`; ``ValueError`` for a corrupt or foreign file."""
        header, arrays = read_state(path, "history-bank")
        return cls._from_state(header.get("bank", {}), arrays, path)

    def __repr__(self) -> str:
        return (f"HistoryBank(clients={len(self)}, n_features={self.n_features}, ema={self.ema}, "
                f"max_clients={self.max_clients})")
