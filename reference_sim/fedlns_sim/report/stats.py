"""Statistics of the report, from run records alone (no torch): best checkpoint, detection rates, mean and
spread over seeds, paired differences with t intervals, recovery, AUC."""

from __future__ import annotations

import math

import numpy as np


def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; NaN for a single value).

    Examples
    --------
    >>> mean_std([1.0, 2.0, 3.0])
    (2.0, 1.0)
    """
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else float("nan")


def t_interval(values, confidence: float = 0.95) -> dict:
    """Mean of ``values`` with its two-sided Student-t confidence interval (NaN bounds for fewer than 2 values).

    Used on per-seed paired differences: each seed gives one difference, so the interval is over seeds.

    Examples
    --------
    >>> result = t_interval([1.0, 2.0, 3.0])
    >>> result["mean"], round(result["low"], 3), round(result["high"], 3), result["n"]
    (2.0, -0.484, 4.484, 3)
    """
    from scipy import stats

    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else float("nan")
    if n < 2:
        return {"mean": mean, "low": float("nan"), "high": float("nan"), "n": n}
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * values.std(ddof=1) / math.sqrt(n))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def recovery(attacked: float, defended: float, oracle: float) -> float:
    """Share of the attack's damage a defence removes: (attacked - defended) / (attacked - oracle).

    1 means the defence matches the oracle (FedAvg over the benign clients only), 0 means no better than
    undefended FedAvg, below 0 worse than FedAvg; NaN when the attack did no damage (attacked <= oracle).

    Examples
    --------
    >>> recovery(attacked=400.0, defended=280.0, oracle=250.0)
    0.8
    """
    gap = attacked - oracle
    return (attacked - defended) / gap if gap > 0 else float("nan")


def auc(positive, negative) -> float:
    """Probability that a random positive scores above a random negative (ties count one half): ROC AUC.

    Examples
    --------
    >>> auc([3.0, 4.0], [1.0, 3.0])
    0.875
    """
    positive = np.asarray(positive, dtype=float)
    negative = np.asarray(negative, dtype=float)
    if not len(positive) or not len(negative):
        return float("nan")
    greater = (positive[:, None] > negative[None, :]).sum()
    ties = (positive[:, None] == negative[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(positive) * len(negative)))


def detection_rates(tp: int, fp: int, fn: int, tn: int) -> dict:
    """TPR = tp/(tp+fn), FPR = fp/(fp+tn), precision = tp/(tp+fp); NaN where undefined.

    Examples
    --------
    >>> detection_rates(3, 1, 1, 5)
    {'tpr': 0.75, 'fpr': 0.16666666666666666, 'precision': 0.75}
    """

    def ratio(a, b):
        return a / b if b else float("nan")

    return {"tpr": ratio(tp, tp + fn), "fpr": ratio(fp, fp + tn), "precision": ratio(tp, tp + fp)}


def screening_counts(rounds) -> dict:
    """Confusion counts and attackers-only rounds over screened rounds, each ``(clients, kept, malicious)``.

    Examples
    --------
    >>> screening_counts([([1, 2, 3], [1, 2], [3]), ([4, 5], [5], [5])])
    {'tp': 1, 'fp': 1, 'fn': 1, 'tn': 2, 'attackers_only': 1}
    """
    counts = dict.fromkeys(("tp", "fp", "fn", "tn", "attackers_only"), 0)
    for clients, kept_ids, malicious_ids in rounds:
        kept, malicious = set(kept_ids), set(malicious_ids)
        for client in clients:
            outcome = ("fn" if client in kept else "tp") if client in malicious else ("tn" if client in kept else "fp")
            counts[outcome] += 1
        counts["attackers_only"] += kept_attackers_only(kept, malicious)
    return counts


def kept_attackers_only(kept_ids, malicious_ids) -> bool:
    """Whether a round kept someone and only attackers (ids compared as strings, as the records store them)."""
    kept = {str(c) for c in kept_ids}
    return bool(kept) and kept <= {str(c) for c in malicious_ids}


def attackers_only_rounds(records: list[dict]) -> list[int]:
    """The rounds after activation whose screen kept attackers only, from a run's records (``rounds.jsonl``).

    Examples
    --------
    >>> attackers_only_rounds([{"round": 0}, {"round": 1, "decided": True, "kept": [3], "malicious_sampled": [3]},
    ...                        {"round": 2, "decided": True, "kept": [1, 3], "malicious_sampled": [3]}])
    [1]
    """
    return [
        record["round"]
        for record in records[1:]
        if record.get("decided")
        and record.get("active", True)
        and kept_attackers_only(record.get("kept", []), record.get("malicious_sampled", []))
    ]


def reason_rounds(records: list[dict], beginning: str) -> list[int]:
    """The rounds where the screen rejected a client with a reason that begins with ``beginning`` (the records
    prefix a reason with how the client was rejected, ``"screened: "``).

    Examples
    --------
    >>> reason_rounds([{"round": 1, "rejected_reasons": {"4": "screened: loud"}}, {"round": 2}], "loud")
    [1]
    """
    return [
        record["round"]
        for record in records
        if any(
            reason.split(": ", 1)[-1].startswith(beginning) for reason in record.get("rejected_reasons", {}).values()
        )
    ]


def best_checkpoint(records: list[dict]) -> dict:
    """The round with the lowest evaluation loss (ties: the earliest), the paper's per-seed reporting rule."""
    trained = [r for r in records if r["round"] >= 1]
    if not trained:
        raise ValueError("no trained rounds to select from")
    return min(trained, key=lambda r: (finite_loss(r), r["round"]))


def last10_loss(records: list[dict]) -> float:
    """The mean evaluation loss of the last ten trained rounds (how a run ends; +inf if one of them diverged)."""
    trained = [r for r in records if r["round"] >= 1]
    if not trained:
        raise ValueError("no trained rounds to average")
    return float(np.mean([finite_loss(r) for r in trained[-10:]]))


def perplexity(loss: float) -> float:
    """exp(loss), +inf where it would overflow."""
    return math.exp(loss) if loss < 700 else float("inf")


def finite_loss(record: dict) -> float:
    """A record's evaluation loss, +inf for a diverged round (``null`` in the file, NaN or inf in memory)."""
    loss = record.get("eval_loss")
    return float(loss) if loss is not None and math.isfinite(loss) else float("inf")
