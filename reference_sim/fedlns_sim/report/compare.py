"""Statistics over run summaries, per setting (family, partition, malicious fraction), paired by seed.

Which runs form the main comparison (:func:`main_runs`), and from them: FedLNS against the strongest baseline
and against FedAvg, the recovery of every defence, what each costs without attackers, and the attack x method
matrix, with t intervals over seeds.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..config import ATTACK_NAMES, BASELINES, FAMILIES, METHODS, PARTITIONS
from .load import PAPER_ATTACK, family_label
from .stats import detection_rates, mean_std, recovery, t_interval

KINDS = {"best": "best", "last10": "last 10"}  # best checkpoint; mean of the last ten rounds


def main_runs(summaries: list[dict]) -> list[dict]:
    """Runs of the main comparison: the paper's attack, FedLNS only at its default activation coverage (others are
    ablation runs)."""
    summaries = [s for s in summaries if s["attack"] == PAPER_ATTACK]
    coverages = {s["coverage"] for s in summaries if s["method"] == "fedlns"}
    default = 0.5 if 0.5 in coverages or not coverages else min(coverages)
    return [s for s in summaries if not s["method"].startswith("fedlns") or s["coverage"] == default]


def group_runs(summaries, keys):
    """The runs grouped by their values at ``keys``: ``{(value, ...): [run, ...]}``, in the order they come."""
    groups = defaultdict(list)
    for s in summaries:
        groups[tuple(s[k] for k in keys)].append(s)
    return groups


def ordered(present, order=METHODS):
    """The names of ``order`` that are in ``present``, in that order."""
    return [m for m in order if m in present]


def setting_order(family, partition, fraction):
    """Sort key of a setting: family and partition in registry order, then the fraction."""
    return FAMILIES.index(family), PARTITIONS.index(partition), fraction


def table_fractions(runs: list[dict]) -> list[float]:
    """The malicious fractions a table's columns show: a 0% column only when a defence ran without attackers too;
    else FedAvg at 0% is the Clean reference row."""
    return sorted({s["fraction"] for s in runs if s["fraction"] > 0 or s["method"] != "fedavg"}) or [0.0]


def sweep_seeds(runs: list[dict]) -> list[int]:
    """The seeds a fraction sweep has at every fraction its table shows (:func:`table_fractions`)."""
    return sorted(set.intersection(*({s["seed"] for s in runs if s["fraction"] == f} for f in table_fractions(runs))))


def attacked_settings(summaries: list[dict]):
    """Per setting with attackers, in table order: ``(family, partition, fraction, runs, by_key)``, its main runs and
    every main run by (family, partition, fraction, method, seed)."""
    main = main_runs(summaries)
    by_key = {(s["family"], s["partition"], s["fraction"], s["method"], s["seed"]): s for s in main}
    for (family, partition, fraction), runs in sorted(
        group_runs(main, ("family", "partition", "fraction")).items(), key=lambda item: setting_order(*item[0])
    ):
        if fraction:
            yield family, partition, fraction, runs, by_key


def paired_rows(summaries: list[dict], confidence: float = 0.95) -> list[dict]:
    """FedLNS against the strongest baseline and against FedAvg, paired by seed, per (family, partition,
    fraction > 0): per-seed differences of perplexity (FedLNS minus the other; negative = FedLNS better) with
    a t interval over seeds, at the best checkpoint and over the last 10 rounds.

    The strongest baseline is the one with the lowest mean best-checkpoint perplexity over the seeds FedLNS ran
    too; the oracle and the clean run are references, never the baseline.
    """
    rows = []
    for family, partition, fraction, runs, by_key in attacked_settings(summaries):
        seeds = {s["seed"] for s in runs if s["method"] == "fedlns"}
        candidates = {}
        for method in BASELINES:
            shared = sorted(seed for seed in seeds if (family, partition, fraction, method, seed) in by_key)
            if shared:
                candidates[method] = (
                    np.mean([by_key[(family, partition, fraction, method, seed)]["perplexity"] for seed in shared]),
                    shared,
                )
        if not candidates:
            continue
        strongest = min(candidates, key=lambda m: candidates[m][0])
        for label, other in (("strongest baseline", strongest), ("FedAvg", "fedavg")):
            if other not in candidates or (label == "FedAvg" and strongest == "fedavg"):
                continue
            shared = candidates[other][1]
            row = {
                "family": family,
                "model": family_label(family, runs),
                "partition": partition,
                "fraction": fraction,
                "against": label,
                "baseline": other,
                "seeds": shared,
            }
            for kind in KINDS:
                key = "perplexity" if kind == "best" else "last10_perplexity"
                differences = [
                    by_key[(family, partition, fraction, "fedlns", seed)][key]
                    - by_key[(family, partition, fraction, other, seed)][key]
                    for seed in shared
                ]
                row[kind] = t_interval(differences, confidence)
                row[f"{kind}_wins"] = sum(d < 0 for d in differences)
            rows.append(row)
    return rows


def recovery_rows(summaries: list[dict], confidence: float = 0.95) -> list[dict]:
    """Recovery (FedAvg - method) / (FedAvg - oracle) of every defence at each fraction > 0, paired by seed:
    the per-seed values' mean with a t interval, and the ratio of the means."""
    rows = []
    for family, partition, fraction, runs, by_key in attacked_settings(summaries):
        for method in ordered({s["method"] for s in runs}):
            if method in ("fedavg", "oracle", "fedlns_two"):
                continue
            seeds = sorted(
                s["seed"]
                for s in runs
                if s["method"] == method
                and (family, partition, fraction, "fedavg", s["seed"]) in by_key
                and (family, partition, fraction, "oracle", s["seed"]) in by_key
            )
            if not seeds:
                continue
            row = {
                "family": family,
                "model": family_label(family, runs),
                "partition": partition,
                "fraction": fraction,
                "method": method,
                "seeds": seeds,
            }
            for kind in KINDS:
                key = "perplexity" if kind == "best" else "last10_perplexity"
                triples = [
                    tuple(by_key[(family, partition, fraction, m, seed)][key] for m in ("fedavg", method, "oracle"))
                    for seed in seeds
                ]
                row[kind] = t_interval([recovery(*t) for t in triples], confidence)
                row[f"{kind}_of_means"] = recovery(*np.mean(triples, axis=0))
            rows.append(row)
    return rows


def clean_cost_rows(summaries: list[dict], confidence: float = 0.95) -> list[dict]:
    """What each defence costs when nobody attacks: at 0% malicious, its perplexity minus clean FedAvg's, paired by
    seed, at the best checkpoint and over the last 10 rounds, absolute and relative to FedAvg (per-seed mean with a
    t interval), and, for methods that pick clients, the share of benign clients it rejected (pooled)."""
    rows = []
    clean = [s for s in main_runs(summaries) if s["fraction"] == 0]
    by_key = {(s["family"], s["partition"], s["method"], s["seed"]): s for s in clean}
    for (family, partition), runs in sorted(
        group_runs(clean, ("family", "partition")).items(), key=lambda item: setting_order(item[0][0], item[0][1], 0.0)
    ):
        for method in ordered({s["method"] for s in runs}):
            if method in ("fedavg", "oracle"):
                continue
            own = [s for s in runs if s["method"] == method and (family, partition, "fedavg", s["seed"]) in by_key]
            if not own:
                continue
            row = {
                "family": family,
                "model": family_label(family, runs),
                "partition": partition,
                "method": method,
                "seeds": sorted(s["seed"] for s in own),
                "selects_clients": own[0]["selects_clients"],
                "fpr": detection_rates(**{k: sum(s[k] for s in own) for k in ("tp", "fp", "fn", "tn")})["fpr"],
            }
            for kind in KINDS:
                key = "perplexity" if kind == "best" else "last10_perplexity"
                pairs = [(s[key], by_key[(family, partition, "fedavg", s["seed"])][key]) for s in own]
                row[kind] = t_interval([m - f for m, f in pairs], confidence)
                row[f"{kind}_relative"] = t_interval([m / f - 1 for m, f in pairs], confidence)
            rows.append(row)
    return rows


def attack_matrix(summaries: list[dict], confidence: float = 0.95) -> list[dict]:
    """The robustness matrix, per (family, partition, fraction): for every method and attack, the best-checkpoint
    and last-10 perplexity (mean and std over seeds), the recovery (FedAvg - method) / (FedAvg - oracle) under
    that attack paired by seed, the best-checkpoint perplexity above the oracle's (per seed, relative; defined
    even where the attack does FedAvg no harm and the recovery is not), detection rates, and the backdoor's
    success rate. Present only when runs of more than the paper's attack exist. The oracle (and clean FedAvg) do
    not depend on the attack: one run serves all."""
    attacked = [s for s in summaries if s["fraction"] > 0]
    if len({s["attack"] for s in attacked}) < 2:
        return []
    oracle = {
        (s["family"], s["partition"], s["fraction"], s["seed"]): s["perplexity"]
        for s in attacked
        if s["method"] == "oracle"
    }
    groups = group_runs(
        [s for s in attacked if s["method"] != "oracle"], ("family", "partition", "fraction", "attack", "method")
    )
    cells = []
    for (family, partition, fraction, attack, method), runs in sorted(
        groups.items(),
        key=lambda item: (*setting_order(*item[0][:3]), ATTACK_NAMES.index(item[0][3]), METHODS.index(item[0][4])),
    ):
        fedavg = {s["seed"]: s["perplexity"] for s in groups.get((family, partition, fraction, attack, "fedavg"), [])}
        with_oracle = [
            (s, oracle[family, partition, fraction, s["seed"]])
            for s in runs
            if (family, partition, fraction, s["seed"]) in oracle
        ]
        paired = [(fedavg[s["seed"]], s["perplexity"], base) for s, base in with_oracle if s["seed"] in fedavg]
        above_oracle = [s["perplexity"] / base - 1 for s, base in with_oracle]
        totals = {k: sum(s[k] for s in runs) for k in ("tp", "fp", "fn", "tn")}
        cells.append(
            {
                "family": family,
                "partition": partition,
                "fraction": fraction,
                "attack": attack,
                "method": method,
                "seeds": sorted(s["seed"] for s in runs),
                "perplexity": mean_std([s["perplexity"] for s in runs]),
                "last10_perplexity": mean_std([s["last10_perplexity"] for s in runs]),
                "recovery": t_interval([recovery(*p) for p in paired], confidence) if paired else None,
                "above_oracle": t_interval(above_oracle, confidence) if above_oracle else None,
                "selects_clients": runs[0]["selects_clients"],
                **detection_rates(**totals),
                "backdoor_asr": mean_std([s["backdoor_asr"] for s in runs]),
            }
        )
    return cells


def matrix_references(summaries: list[dict]) -> dict:
    """The references beside each panel of the attack matrix, which no attack changes: per (family, partition,
    fraction), ``{"Oracle": its runs at that fraction, "Clean": FedAvg's runs at 0%}``, either left out if absent."""
    clean = group_runs(
        [s for s in summaries if s["method"] == "fedavg" and s["fraction"] == 0], ("family", "partition")
    )
    oracle = group_runs(
        [s for s in summaries if s["method"] == "oracle" and s["fraction"] > 0], ("family", "partition", "fraction")
    )
    settings = {(s["family"], s["partition"], s["fraction"]) for s in summaries if s["fraction"] > 0}
    return {
        key: {name: runs for name, runs in (("Oracle", oracle.get(key)), ("Clean", clean.get(key[:2]))) if runs}
        for key in settings
    }
