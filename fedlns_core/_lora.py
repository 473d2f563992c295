"""The LoRA-native signature: how much each input and output direction of every LoRA adapter changed.

Not in the paper. A LoRA module adds ``B A`` to a frozen weight, with ``A`` of shape (r, d_in) and ``B`` of
shape (d_out, r). Federated fine-tuning stacks send only these factors, usually with the normalization layers
frozen, so the paper's signature has nothing to read. For a client that changed them by ``dA = A_i - A`` and
``dB = B_i - B``, the LoRA signature of the module is (``docs/concepts.md``)::

    a_j = || dA[:, j] ||_2   for j = 1..d_in     (column norms: how much input direction j moved)
    b_k = || dB[k, :] ||_2   for k = 1..d_out    (row norms: how much output direction k moved)

A DoRA module also learns a magnitude per output direction (``lora_magnitude_vector``, d_out values); its
change is taken as it is, like a normalization parameter's (eq. ``sig_layer``). PEFT's other factor pairs have the
same shapes and are read the same way: a LoRA embedding (``lora_embedding_A``, (r, vocabulary), and
``lora_embedding_B``, (d_embed, r): one value per token and per embedding direction) and AdaLoRA's ``lora_A`` and
``lora_B`` (named without ``.weight``; its r singular values ``lora_E`` are left to the update sketches). A
convolution's factors, (r, c_in, *kernel) and (c_out, r, 1, ...), are read as their matrices, (r, c_in x kernel
positions) and (c_out, r).

``d_in + d_out`` numbers per module instead of ``r (d_in + d_out)``, unchanged by any rotation of the rank
space (``dA -> Q dA``, ``dB -> dB Q^T`` with ``Q`` orthogonal leaves every norm as it is), and linear in the
change's scale. They take the place of the normalization deltas of eq. ``sig_layer``: the bank,
the median/MAD standardization and the retain rule run on them unchanged.

Being magnitudes, they cannot see an attacker that keeps its change inside the benign magnitude band; the
full-update sketches of the default retain rule look at directions (``docs/attacks.md``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

import numpy as np

#: Suffixes of the signature entries of a LoRA factor (spaces cannot occur in a parameter's name).
COLUMN_NORMS, ROW_NORMS = " column norms", " row norms"
#: PEFT's name of a DoRA module's magnitude vector.
MAGNITUDE = "lora_magnitude_vector"
# PEFT's names of the first factor: "<module>.lora_A.weight" in get_peft_model_state_dict payloads and
# "<module>.lora_A.<adapter>.weight" in a PeftModel's state_dict; an embedding's "<module>.lora_embedding_A" and
# AdaLoRA's "<module>.lora_A" in payloads, each with ".<adapter>" in a state_dict. The twin has B for A.
_LORA_A = re.compile(r"^(?P<module>.+)\.(?P<factor>lora_A|lora_embedding_A)(?P<rest>(?:\.[^.]+)?(?:\.weight)?)$")


def _adapter(rest: str) -> str:
    """The ``.<adapter>`` part of what follows a factor's name (``""`` in payloads)."""
    return rest[: -len(".weight")] if rest.endswith(".weight") else rest


def lora_pairs(params: Mapping[str, np.ndarray]) -> list[tuple[str, str]]:
    """The ``(A, B)`` key pairs of every LoRA module in ``params``, sorted by A's key.

    A pair is ``<module>.lora_A[.<adapter>].weight`` with its ``lora_B`` twin, or PEFT's other names of the same
    factors: ``<module>.lora_embedding_A[.<adapter>]`` (a LoRA embedding) and ``<module>.lora_A[.<adapter>]``
    (AdaLoRA), each with its B twin; ``ValueError`` when a pair's shapes are not (r, d_in) and (d_out, r) with the
    same r.

    Examples
    --------
    >>> params = {"q.lora_A.weight": np.zeros((4, 10)), "q.lora_B.weight": np.zeros((6, 4)), "q.weight": 0,
    ...           "wte.lora_embedding_A": np.zeros((4, 50)), "wte.lora_embedding_B": np.zeros((6, 4))}
    >>> lora_pairs(params)
    [('q.lora_A.weight', 'q.lora_B.weight'), ('wte.lora_embedding_A', 'wte.lora_embedding_B')]
    """
    pairs = []
    for key in sorted(params):
        found = _LORA_A.match(key)
        if found is None:
            continue
        twin = f"{found['module']}.{found['factor'][:-1]}B{found['rest']}"
        if twin not in params:
            continue
        a, b = np.shape(params[key]), np.shape(params[twin])
        if len(a) < 2 or len(a) != len(b) or a[0] != b[1]:
            raise ValueError(
                f"LoRA factors {key!r} {a} and {twin!r} {b} are not (r, d_in) and (d_out, r), "
                "nor a convolution's (r, c_in, *kernel) and (c_out, r, *ones)"
            )
        pairs.append((key, twin))
    return pairs


def lora_entries(pairs: Iterable[tuple[str, str]], params: Mapping[str, np.ndarray]) -> list[tuple[str, str, str, int]]:
    """``(entry name, payload key, statistic, length)`` of the signature entries of ``pairs``: A's column norms
    (``"columns"``, d_in values), B's row norms (``"rows"``, d_out values) and, for DoRA, the change of the
    magnitude vector (``"magnitude"``, d_out values; ``<module>.lora_magnitude_vector[.<adapter>].weight`` in a
    state dict, ``<module>.lora_magnitude_vector`` in a payload)."""
    entries = []
    for a, b in pairs:
        d_out = int(np.shape(params[b])[0])
        d_in = math.prod(np.shape(params[a])[1:])  # a convolution's input channels times its kernel positions
        entries.append((a + COLUMN_NORMS, a, "columns", d_in))
        entries.append((b + ROW_NORMS, b, "rows", d_out))
        found = _LORA_A.match(a)
        assert found is not None  # pairs holds only names _LORA_A matched
        module, adapter = found["module"], _adapter(found["rest"])
        for magnitude in (f"{module}.{MAGNITUDE}{adapter}.weight", f"{module}.{MAGNITUDE}"):
            if magnitude in params and np.size(params[magnitude]) == d_out:  # a convolution's is (1, d_out, 1, ...)
                entries.append((magnitude, magnitude, "magnitude", d_out))
                break
    return entries


def lora_payload_keys(params: Mapping[str, np.ndarray]) -> tuple[str, ...]:
    """The entries of ``params`` that the LoRA signature reads (``FedLNS(signature="lora")``): every LoRA factor
    pair and DoRA magnitude vector, sorted.

    Examples
    --------
    >>> lora_payload_keys({"q.lora_A.weight": np.zeros((4, 10)), "q.lora_B.weight": np.zeros((6, 4)),
    ...                    "q.lora_magnitude_vector": np.ones(6), "ln.weight": np.ones(10)})
    ('q.lora_A.weight', 'q.lora_B.weight', 'q.lora_magnitude_vector')
    """
    return tuple(sorted(source for _, source, _, _ in lora_entries(lora_pairs(params), params)))


def change_norms(client: np.ndarray, reference: np.ndarray, statistic: str, out: np.ndarray) -> None:
    """Write the column (``"columns"``) or row (``"rows"``) norms of ``client - reference`` into ``out``.

    In the factors' precision: float32 arithmetic for factors of float32 or narrower (what a model sends), so
    every norm is exactly a float32 and the bank stores the signature in float32 (half the memory and sorting
    time of float64; the norms are within a few float32 rounding errors of the float64 ones, far below any
    difference the screen reads); float64 arithmetic for float64 factors.

    Examples
    --------
    >>> out = np.empty(2)
    >>> change_norms(np.array([[3.0, 0.0], [4.0, 1.0]]), np.zeros((2, 2)), "columns", out)
    >>> out.tolist()
    [5.0, 1.0]
    >>> change_norms(np.array([[3.0, 0.0], [4.0, 1.0]], np.float32), np.zeros((2, 2), np.float32), "rows", out)
    >>> out.tolist()
    [3.0, 4.123105525970459]
    """
    dtype = np.result_type(client, reference, np.float32)
    change = np.subtract(client, reference, dtype=dtype if dtype.itemsize <= 4 else np.float64)
    change = change.reshape(change.shape[0], -1)  # a convolution's factor as its matrix (a view)
    np.sqrt(np.einsum("ij,ij->j" if statistic == "columns" else "ij,ij->i", change, change), out=out)
