"""Tables made from run files only (config.json + rounds.jsonl), never from in-memory state.

Per seed, the checkpoint with the lowest evaluation loss gives loss, perplexity and entropy (the paper's rule),
and beside it the mean of the last ten rounds (how the run ends). Entries are the mean and sample standard
deviation over seeds. Every table carries its references: ``Clean`` (FedAvg with no attacker), ``Oracle``
(FedAvg over the round's benign clients only, which reads the ground truth) and, for perplexity, the unigram
model of the evaluation set. Comparisons between methods are paired by seed. The report refuses to mix runs
made by different code unless asked to.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from ..config import (ATTACK_NAMES, BASELINES, CORPUS_NAMES, FAMILIES, FAMILY_CORPUS, FAMILY_NAMES, METHOD_NAMES,
                     METHODS, PARTITION_NAMES, PARTITIONS)
from ..runfiles import read_records
from .stats import (auc, best_checkpoint, detection_rates, finite_loss, last10_loss, mean_std, perplexity,
                    recovery, t_interval)

METRICS = {"eval_loss": "Test Loss", "perplexity": "Test PPL", "entropy": "Semantic Entropy"}
KINDS = {"best": "best", "last10": "last 10"}   # best checkpoint; mean of the last ten rounds
CLEAN, UNIGRAM = "clean", "unigram"              # reference rows besides the oracle method
PAPER_ATTACK = "target_corruption"
ROW_NAMES = {**METHOD_NAMES, CLEAN: "Clean (FedAvg, 0% malicious)", UNIGRAM: "Unigram model"}


class MixedCodeError(ValueError):
    """Runs made by different code were about to be put into one table."""


def load_runs(root: str | Path, finished_only: bool = True) -> list[dict]:
    """One summary per run folder under ``root``: its config, best checkpoint, last ten rounds, detection totals,
    screening diagnostics and timings.

    Runs still in progress (fewer records than rounds) are left out unless ``finished_only=False``: a table must
    not mix a method's 40-round result with another's 12-round one.
    """
    summaries = []
    for config_path in sorted(Path(root).rglob("config.json")):
        meta = json.loads(config_path.read_text())
        config = meta["config"]
        records = read_records(config_path.parent)
        trained = [r for r in records if r["round"] >= 1]
        if not trained or (finished_only and trained[-1]["round"] < config["rounds"]):
            continue
        best, last10 = best_checkpoint(records), last10_loss(records)
        last = trained[-10:]
        decided = [r for r in trained if r.get("decided") and "tp" in r]
        totals = {k: sum(r[k] for r in decided) for k in ("tp", "fp", "fn", "tn")}
        active = [r["round"] for r in trained if r.get("active", True) and r.get("decided", True)]
        code = meta.get("code") or {}
        summaries.append({
            "run": config_path.parent.name, "family": config["family"], "partition": config["partition"],
            "method": config["method"], "fraction": config["malicious_fraction"], "seed": config["seed"],
            "attack": config.get("attack", PAPER_ATTACK),
            "backdoor_asr": _mean_or_nan([r.get("backdoor_asr") for r in last]),
            "coverage": config["activation_coverage"], "rounds": config["rounds"], "completed": trained[-1]["round"],
            "best_round": best["round"], "eval_loss": finite_loss(best), "perplexity": perplexity(finite_loss(best)),
            "entropy": best["entropy"],
            "last10_eval_loss": last10, "last10_perplexity": perplexity(last10),
            "last10_entropy": _mean_or_nan([r.get("entropy") for r in last]),
            "initial_perplexity": perplexity(finite_loss(records[0])) if records[0]["round"] == 0 else None,
            "final_perplexity": perplexity(finite_loss(trained[-1])),
            "unigram_perplexity": meta.get("unigram_perplexity"),
            "selects_clients": any(r.get("selects_clients") for r in trained),
            **totals, **detection_rates(**totals), **screening_diagnostics(trained),
            "client_time_s": sum(r["client_time_s"] for r in trained),
            "server_time_s": sum(r["server_time_s"] for r in trained),
            "eval_time_s": sum(r["eval_time_s"] for r in trained),
            "activation_round": active[0] if active else None,
            "early_best": _early_best(trained, active[0]) if active else None,
            "curve": [(r["round"], perplexity(finite_loss(r))) for r in records],
            "corpus": config.get("corpus") or FAMILY_CORPUS[config["family"]],
            "pretrain_corpus": config.get("pretrain_corpus", ""), "peft": config.get("peft", ""),
            "n_parameters": meta.get("n_parameters"), "payload_parameters": meta.get("payload_parameters"),
            "data_source": meta.get("data_source"),
            "eval_positions": meta.get("eval_positions"),
            "code_source": code.get("source", "unknown"), "code_commit": code.get("commit"),
            "code_dirty": code.get("dirty"), "code_version": code.get("version"),
            "machine": machine_text(meta.get("machine")),
        })
    return summaries


def screening_diagnostics(trained: list[dict]) -> dict:
    """FedLNS's active rounds, from the per-round deltas and labels the run recorded.

    ``wrong_cluster_rounds``: rounds where the rejected group held a smaller share of attackers than the
    retained one (the mixture kept the wrong side). ``auc``: mean over rounds with both kinds of clients of the
    probability that an attacker's delta exceeds a benign client's. ``one_component_rounds``: BIC chose one
    component. ``singleton_rounds``: two components, one of them a single client.
    """
    rounds = [r for r in trained if r.get("delta")]
    if not rounds:
        return {"active_rounds": 0, "wrong_cluster_rounds": None, "auc": None, "one_component_rounds": None,
                "singleton_rounds": None}
    wrong, aucs, one, singleton = 0, [], 0, 0
    for r in rounds:
        bad = {str(c) for c in r.get("malicious_sampled", [])}
        rejected = [c for c, label in r["label"].items() if label != 0]
        kept = [c for c, label in r["label"].items() if label == 0]
        if rejected and kept and _share(rejected, bad) < _share(kept, bad):
            wrong += 1
        attackers = [d for c, d in r["delta"].items() if c in bad]
        benign = [d for c, d in r["delta"].items() if c not in bad]
        if attackers and benign:
            aucs.append(auc(attackers, benign))
        one += r.get("n_components") == 1
        singleton += r.get("n_components") == 2 and min(len(rejected), len(kept)) == 1
    return {"active_rounds": len(rounds), "wrong_cluster_rounds": wrong,
            "auc": float(np.mean(aucs)) if aucs else None, "one_component_rounds": one,
            "singleton_rounds": singleton}


def _share(clients, bad) -> float:
    return sum(c in bad for c in clients) / len(clients)


def _mean_or_nan(values) -> float:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else float("nan")


def _early_best(trained: list[dict], activation_round: int, window: int = 10) -> dict:
    """Bank-coverage ablation rule: the best of the first ``window`` active rounds."""
    rows = [r for r in trained if activation_round <= r["round"] < activation_round + window]
    best = min(rows, key=finite_loss)
    return {"eval_loss": finite_loss(best), "perplexity": perplexity(finite_loss(best)), "entropy": best["entropy"]}


def check_same_code(summaries: list[dict]) -> dict:
    """The code that made the runs; raises :class:`MixedCodeError` if they were made by different code."""
    sources = defaultdict(list)
    for s in summaries:
        sources[s["code_source"]].append(s)
    if len(sources) > 1:
        parts = ", ".join(f"{source} ({len(runs)} runs, commit {(runs[0]['code_commit'] or '?')[:10]})"
                          for source, runs in sorted(sources.items(), key=lambda item: -len(item[1])))
        raise MixedCodeError(f"the runs were made by {len(sources)} versions of the code: {parts}; re-run them "
                             "at one version, or pass --allow-mixed-code")
    first = summaries[0]
    return {"source": first["code_source"], "commit": first["code_commit"], "dirty": first["code_dirty"],
            "version": first["code_version"]}


def machine_text(machine: dict | None) -> str:
    """A run's recorded machine (``config.json``'s ``machine``) in words: processor, kernels, torch, GPU."""
    if not machine:
        return "not recorded (runs before machine records)"
    text = f"{machine.get('cpu', '?')} ({machine.get('cpu_capability', '?')} kernels, torch {machine.get('torch', '?')}"
    return text + (f", {machine['gpu']})" if machine.get("gpu") else ")")


def _machines_text(summaries: list[dict]) -> str:
    """The machines the runs were made on, with their counts when there are several (their kernels round
    differently, so a cell re-runs number for number only on its own kind)."""
    counts = Counter(s["machine"] for s in summaries).most_common()
    if len(counts) == 1:
        return counts[0][0]
    return "; ".join(f"{machine} ({n} run{'s' * (n != 1)})" for machine, n in counts)


def main_runs(summaries: list[dict]) -> list[dict]:
    """Runs of the main comparison: the paper's attack, FedLNS only at its default activation coverage (others are
    ablation runs)."""
    summaries = [s for s in summaries if s["attack"] == PAPER_ATTACK]
    coverages = {s["coverage"] for s in summaries if s["method"] == "fedlns"}
    default = 0.5 if 0.5 in coverages or not coverages else min(coverages)
    return [s for s in summaries if not s["method"].startswith("fedlns") or s["coverage"] == default]


def _group(summaries, keys):
    groups = defaultdict(list)
    for s in summaries:
        groups[tuple(s[k] for k in keys)].append(s)
    return groups


def _ordered(present, order=METHODS):
    return [m for m in order if m in present]


def _cell(mean, std, digits):
    if not math.isfinite(mean):
        return "inf"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if math.isfinite(std) else "")


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"


# ------------------------------------------------------------------------------------------ tables

def fraction_tables(summaries: list[dict]) -> list[dict]:
    """The appendix tables with references: per (family, partition, metric) rows = methods, then Oracle, Clean and
    (perplexity) Unigram; columns = malicious fractions x {best checkpoint, last 10 rounds}."""
    main = [s for s in main_runs(summaries) if s["method"] != "fedlns_two"]
    tables = []
    for family in FAMILIES:
        for partition in PARTITIONS:
            subset = [s for s in main if s["family"] == family and s["partition"] == partition]
            if not subset:
                continue
            # every column over the same seeds: the fraction sweep may have fewer seeds than the 40% comparison
            seeds, all_seeds = sweep_seeds(subset), sorted({s["seed"] for s in subset})
            subset = [s for s in subset if s["seed"] in seeds]
            note = f"Seeds: {_seed_list(seeds)}."
            if seeds != all_seeds:
                top = _percent(max(s["fraction"] for s in subset))
                note += (f" Those run at every fraction; all seeds of the {top}"
                         f" comparison ({_seed_list(all_seeds)}) are in 'At a glance' and the paired tables.")
            fractions = table_fractions(subset)
            methods = _ordered({s["method"] for s in subset})
            methods = [m for m in methods if m != "oracle"] + [m for m in methods if m == "oracle"]
            clean = [s for s in subset if s["method"] == "fedavg" and s["fraction"] == 0.0]
            groups = _group(subset, ("method", "fraction"))
            columns = [(f, kind) for f in fractions for kind in KINDS]
            for metric, title in METRICS.items():
                cells = {}
                for (method, fraction), runs in groups.items():
                    for kind in KINDS:
                        cells[(method, (fraction, kind))] = _stat(runs, metric, kind)
                rows = list(methods)
                if clean:
                    rows.append(CLEAN)
                    for column in columns:
                        cells[(CLEAN, column)] = _stat(clean, metric, column[1])
                if metric == "perplexity":
                    unigram = list({s["seed"]: s["unigram_perplexity"] for s in subset
                                    if s["unigram_perplexity"] is not None}.values())   # one value per seed
                    if unigram:
                        rows.append(UNIGRAM)
                        for column in columns:
                            cells[(UNIGRAM, column)] = mean_std(unigram) + (len(unigram),)
                tables.append({"family": family, "partition": partition, "metric": metric,
                               "title": f"{title} under different malicious-client fractions for "
                                        f"{family_label(family, subset)} with {PARTITION_NAMES[partition]} partition "
                                        "(best checkpoint and mean of the last 10 rounds)",
                               "columns": [f"{_percent(f)} {KINDS[kind]}" for f, kind in columns],
                               "keys": columns, "rows": rows, "cells": cells, "seeds": seeds, "note": note,
                               "references": {"oracle", CLEAN, UNIGRAM}})
    return tables


def table_fractions(runs: list[dict]) -> list[float]:
    """The malicious fractions a table's columns show: a 0% column only when a defence ran without attackers too;
    else FedAvg at 0% is the Clean reference row."""
    return sorted({s["fraction"] for s in runs if s["fraction"] > 0 or s["method"] != "fedavg"}) or [0.0]


def sweep_seeds(runs: list[dict]) -> list[int]:
    """The seeds a fraction sweep has at every fraction its table shows (:func:`table_fractions`)."""
    return sorted(set.intersection(*({s["seed"] for s in runs if s["fraction"] == f}
                                     for f in table_fractions(runs))))


def _seed_list(seeds) -> str:
    return ", ".join(str(seed) for seed in seeds)


def _stat(runs, metric, kind):
    key = metric if kind == "best" else f"last10_{metric}"
    return mean_std([s[key] for s in runs]) + (len(runs),)


def family_label(family: str, runs: list[dict]) -> str:
    """'GPT / WikiText' etc., or 'GPT / synthetic corpus' when the runs used the generated corpus."""
    model = FAMILY_NAMES[family].split(" /")[0]
    if runs and all((s.get("data_source") or "").startswith("synthetic") for s in runs):
        return f"{model} / synthetic corpus"
    if runs and runs[0].get("pretrain_corpus"):   # the fine-tuning scenario (finetune.py)
        peft = {"lora": "LoRA", "": "full"}.get(runs[0]["peft"], runs[0]["peft"])
        return (f"{model} / {CORPUS_NAMES[runs[0]['corpus']]}, {peft} fine-tuning of a "
                f"{CORPUS_NAMES[runs[0]['pretrain_corpus']]} base")
    return FAMILY_NAMES[family]


def paired_rows(summaries: list[dict], confidence: float = 0.95) -> list[dict]:
    """FedLNS against the strongest baseline and against FedAvg, paired by seed, per (family, partition,
    fraction > 0): per-seed differences of perplexity (FedLNS minus the other; negative = FedLNS better) with
    a t interval over seeds, at the best checkpoint and over the last 10 rounds.

    The strongest baseline is the one with the lowest mean best-checkpoint perplexity over the seeds FedLNS ran
    too; the oracle and the clean run are references, never the baseline.
    """
    rows = []
    main = main_runs(summaries)
    by_key = {(s["family"], s["partition"], s["fraction"], s["method"], s["seed"]): s for s in main}
    for (family, partition, fraction), runs in sorted(_group(main, ("family", "partition", "fraction")).items(),
                                                      key=lambda item: _setting_order(*item[0])):
        if fraction == 0:
            continue
        seeds = {s["seed"] for s in runs if s["method"] == "fedlns"}
        candidates = {}
        for method in BASELINES:
            shared = sorted(seed for seed in seeds if (family, partition, fraction, method, seed) in by_key)
            if shared:
                candidates[method] = (np.mean([by_key[(family, partition, fraction, method, seed)]["perplexity"]
                                               for seed in shared]), shared)
        if not candidates:
            continue
        strongest = min(candidates, key=lambda m: candidates[m][0])
        for label, other in (("strongest baseline", strongest), ("FedAvg", "fedavg")):
            if other not in candidates or (label == "FedAvg" and strongest == "fedavg"):
                continue
            shared = candidates[other][1]
            row = {"family": family, "model": family_label(family, runs), "partition": partition, "fraction": fraction,
                   "against": label,
                   "baseline": other, "seeds": shared}
            for kind in KINDS:
                key = "perplexity" if kind == "best" else "last10_perplexity"
                differences = [by_key[(family, partition, fraction, "fedlns", seed)][key]
                               - by_key[(family, partition, fraction, other, seed)][key] for seed in shared]
                row[kind] = t_interval(differences, confidence)
                row[f"{kind}_wins"] = sum(d < 0 for d in differences)
            rows.append(row)
    return rows


def recovery_rows(summaries: list[dict], confidence: float = 0.95) -> list[dict]:
    """Recovery (FedAvg - method) / (FedAvg - oracle) of every defence at each fraction > 0, paired by seed:
    the per-seed values' mean with a t interval, and the ratio of the means."""
    rows = []
    main = main_runs(summaries)
    by_key = {(s["family"], s["partition"], s["fraction"], s["method"], s["seed"]): s for s in main}
    for (family, partition, fraction), runs in sorted(_group(main, ("family", "partition", "fraction")).items(),
                                                      key=lambda item: _setting_order(*item[0])):
        if fraction == 0:
            continue
        for method in _ordered({s["method"] for s in runs}):
            if method in ("fedavg", "oracle", "fedlns_two"):
                continue
            seeds = sorted(s["seed"] for s in runs if s["method"] == method
                           and (family, partition, fraction, "fedavg", s["seed"]) in by_key
                           and (family, partition, fraction, "oracle", s["seed"]) in by_key)
            if not seeds:
                continue
            row = {"family": family, "model": family_label(family, runs), "partition": partition, "fraction": fraction,
                   "method": method, "seeds": seeds}
            for kind in KINDS:
                key = "perplexity" if kind == "best" else "last10_perplexity"
                triples = [tuple(by_key[(family, partition, fraction, m, seed)][key]
                                 for m in ("fedavg", method, "oracle")) for seed in seeds]
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
    for (family, partition), runs in sorted(_group(clean, ("family", "partition")).items(),
                                            key=lambda item: _setting_order(*item[0], 0.0)):
        for method in _ordered({s["method"] for s in runs}):
            if method in ("fedavg", "oracle"):
                continue
            own = [s for s in runs if s["method"] == method and (family, partition, "fedavg", s["seed"]) in by_key]
            if not own:
                continue
            row = {"family": family, "model": family_label(family, runs), "partition": partition, "method": method,
                   "seeds": sorted(s["seed"] for s in own), "selects_clients": own[0]["selects_clients"],
                   "fpr": detection_rates(**{k: sum(s[k] for s in own) for k in ("tp", "fp", "fn", "tn")})["fpr"]}
            for kind in KINDS:
                key = "perplexity" if kind == "best" else "last10_perplexity"
                pairs = [(s[key], by_key[(family, partition, "fedavg", s["seed"])][key]) for s in own]
                row[kind] = t_interval([m - f for m, f in pairs], confidence)
                row[f"{kind}_relative"] = t_interval([m / f - 1 for m, f in pairs], confidence)
            rows.append(row)
    return rows


def _setting_order(family, partition, fraction):
    return FAMILIES.index(family), PARTITIONS.index(partition), fraction


def gmm_tables(summaries: list[dict]) -> list[dict]:
    """GMM-selection ablation (BIC vs forced two components): rows = rule, columns = families, same seeds."""
    tables = []
    subset = [s for s in main_runs(summaries) if s["method"] in ("fedlns", "fedlns_two")]
    key = lambda s: (s["family"], s["partition"], s["fraction"], s["seed"])  # noqa: E731
    both = {key(s) for s in subset if s["method"] == "fedlns"} & {key(s) for s in subset if s["method"] == "fedlns_two"}
    subset = [s for s in subset if key(s) in both]
    for (partition, fraction), runs in sorted(_group(subset, ("partition", "fraction")).items()):
        families = [f for f in FAMILIES if any(s["family"] == f for s in runs)]
        groups = _group(runs, ("method", "family"))
        for metric, title in METRICS.items():
            tables.append({"title": f"GMM-selection ablation under {PARTITION_NAMES[partition]} partition with "
                                    f"{_percent(fraction)} malicious clients. Metric: {title}",
                           "columns": [FAMILY_NAMES[f] for f in families], "keys": families,
                           "rows": ["fedlns", "fedlns_two"], "metric": metric,
                           "cells": {k: mean_std([s[metric] for s in rs]) + (len(rs),) for k, rs in groups.items()},
                           "row_names": {"fedlns": "BIC 1/2-GMM", "fedlns_two": "Forced 2-GMM"},
                           "row_header": "GMM rule"})
    return tables


def bank_tables(summaries: list[dict]) -> list[dict]:
    """Bank-coverage ablation: rows = M_act/K, columns = families; best of the first ten active rounds."""
    subset = [s for s in summaries if s["method"] == "fedlns" and s["attack"] == PAPER_ATTACK]
    tables = []
    for (partition, fraction), runs in sorted(_group(subset, ("partition", "fraction")).items()):
        if len({s["coverage"] for s in runs}) < 2:
            continue
        families = [f for f in FAMILIES if any(s["family"] == f for s in runs)]
        groups = _group(runs, ("coverage", "family"))
        coverages = sorted({s["coverage"] for s in runs})
        names = {c: f"{round(c * 100)}%" for c in coverages}
        common = {"columns": [FAMILY_NAMES[f] for f in families], "keys": families, "rows": coverages,
                  "row_names": names, "row_header": "M_act/K"}
        tables.append({**common, "title": f"Activation rounds, {PARTITION_NAMES[partition]} partition, "
                                          f"{_percent(fraction)} malicious", "metric": "activation_round",
                       "digits": 1,
                       "cells": {k: mean_std([s["activation_round"] for s in rs]) + (len(rs),)
                                 for k, rs in groups.items()}})
        for metric, title in METRICS.items():
            tables.append({**common, "metric": metric,
                           "title": f"Bank-coverage ablation, first ten active rounds, {PARTITION_NAMES[partition]} "
                                    f"partition, {_percent(fraction)} malicious. Metric: {title}",
                           "cells": {k: mean_std([s["early_best"][metric] for s in rs]) + (len(rs),)
                                     for k, rs in groups.items()}})
    return tables


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
    oracle = {(s["family"], s["partition"], s["fraction"], s["seed"]): s["perplexity"]
              for s in attacked if s["method"] == "oracle"}
    groups = _group([s for s in attacked if s["method"] != "oracle"],
                    ("family", "partition", "fraction", "attack", "method"))
    cells = []
    for (family, partition, fraction, attack, method), runs in sorted(
            groups.items(), key=lambda item: (*_setting_order(*item[0][:3]), ATTACK_NAMES.index(item[0][3]),
                                              METHODS.index(item[0][4]))):
        fedavg = {s["seed"]: s["perplexity"] for s in groups.get((family, partition, fraction, attack, "fedavg"), [])}
        with_oracle = [(s, oracle[family, partition, fraction, s["seed"]]) for s in runs
                       if (family, partition, fraction, s["seed"]) in oracle]
        paired = [(fedavg[s["seed"]], s["perplexity"], base) for s, base in with_oracle if s["seed"] in fedavg]
        above_oracle = [s["perplexity"] / base - 1 for s, base in with_oracle]
        totals = {k: sum(s[k] for s in runs) for k in ("tp", "fp", "fn", "tn")}
        cells.append({"family": family, "partition": partition, "fraction": fraction, "attack": attack,
                      "method": method, "seeds": sorted(s["seed"] for s in runs),
                      "perplexity": mean_std([s["perplexity"] for s in runs]),
                      "last10_perplexity": mean_std([s["last10_perplexity"] for s in runs]),
                      "recovery": t_interval([recovery(*p) for p in paired], confidence) if paired else None,
                      "above_oracle": t_interval(above_oracle, confidence) if above_oracle else None,
                      "selects_clients": runs[0]["selects_clients"], **detection_rates(**totals),
                      "backdoor_asr": mean_std([s["backdoor_asr"] for s in runs])})
    return cells


def _matrix_cell(cell: dict | None, metric: str) -> str:
    """One cell of the attack matrix: the perplexity; at the best checkpoint also the recovery (where defined),
    the detection rates and the backdoor's success rate."""
    if cell is None:
        return "–"
    text = _cell(*cell[metric], 0)
    if metric != "perplexity":
        return text
    if cell["method"] != "fedavg" and cell["recovery"] is not None and math.isfinite(cell["recovery"]["mean"]):
        text += f" (rec {cell['recovery']['mean']:.2f})"
    if cell["selects_clients"] and math.isfinite(cell["tpr"]):
        text += f" {_pct(cell['tpr'])}/{_pct(cell['fpr'])}"
    if cell["attack"] == "backdoor" and math.isfinite(cell["backdoor_asr"][0]):
        text += f" ASR {cell['backdoor_asr'][0]:.2f}"
    return text


def matrix_references(summaries: list[dict]) -> dict:
    """The references beside each panel of the attack matrix, which no attack changes: per (family, partition,
    fraction), ``{"Oracle": its runs at that fraction, "Clean": FedAvg's runs at 0%}``, either left out if absent."""
    clean = _group([s for s in summaries if s["method"] == "fedavg" and s["fraction"] == 0], ("family", "partition"))
    oracle = _group([s for s in summaries if s["method"] == "oracle" and s["fraction"] > 0],
                    ("family", "partition", "fraction"))
    settings = {(s["family"], s["partition"], s["fraction"]) for s in summaries if s["fraction"] > 0}
    return {key: {name: runs for name, runs in (("Oracle", oracle.get(key)), ("Clean", clean.get(key[:2]))) if runs}
            for key in settings}


def attack_matrix_markdown(cells: list[dict], references: dict | None = None) -> str:
    """Two tables per (family, partition, fraction), rows = methods, columns = attacks: the best checkpoint (with
    the recovery where the attack harmed FedAvg at every seed, detection rates and the backdoor's success), and
    the mean of the last 10 rounds; under each, the oracle and clean references (:func:`matrix_references`)."""
    references = references or {}
    out = []
    for (family, partition, fraction), group in _group(cells, ("family", "partition", "fraction")).items():
        attacks = [a for a in ATTACK_NAMES if any(c["attack"] == a for c in group)]
        methods = [m for m in METHODS if any(c["method"] == m for c in group)]
        by = {(c["method"], c["attack"]): c for c in group}
        setting = f"{FAMILY_NAMES[family]}, {PARTITION_NAMES[partition]}, {_percent(fraction)} malicious"
        for title, metric in ((f"**{setting}: best-checkpoint perplexity (recovery; TPR/FPR for methods that pick "
                               "clients; backdoor success)**", "perplexity"),
                              (f"**{setting}: perplexity, mean of the last 10 rounds**", "last10_perplexity")):
            out += [title, "", "| Method | " + " | ".join(attacks) + " |", "|---" * (len(attacks) + 1) + "|"]
            out += [f"| {METHOD_NAMES[method]} | " + " | ".join(_matrix_cell(by.get((method, attack)), metric)
                                                                for attack in attacks) + " |" for method in methods]
            known = references.get((family, partition, fraction), {})
            if known:
                out += ["", "References, whatever the attack: " + "; ".join(
                    f"*{name}* {_cell(*mean_std([s[metric] for s in runs]), 0)} ({len(runs)} seeds)"
                    for name, runs in known.items()) + "."]
            out.append("")
    return "\n".join(out)


def to_markdown(table: dict) -> str:
    """A table as Markdown; the lowest mean per column among the compared methods is bold (references never)."""
    names = table.get("row_names", ROW_NAMES)
    best = _best_per_column(table)
    lines = [f"**{table['title']}**", "",
             f"| {table.get('row_header', 'Method')} | " + " | ".join(table["columns"]) + " |",
             "|---" * (len(table["columns"]) + 1) + "|"]
    for row in table["rows"]:
        cells = []
        for column in table["keys"]:
            if (row, column) not in table["cells"]:
                cells.append("–")
                continue
            mean, std, n = table["cells"][(row, column)]
            text = _cell(mean, std, table.get("digits", 2))
            text = f"**{text}**" if best.get(column) == row else text
            if len(table.get("seeds", ())) > n:   # a cell with fewer seeds than the table
                text += f" (n={n})"
            cells.append(text)
        name = names.get(row, row)
        lines.append(f"| {'*' + name + '*' if row in table.get('references', ()) else name} | " + " | ".join(cells)
                     + " |")
    if table.get("note"):
        lines += ["", table["note"]]
    return "\n".join(lines) + "\n"


def to_latex(table: dict) -> str:
    """A table laid out like the paper's (booktabs, mean $\\pm$ std, best in bold, references in italics)."""
    names = table.get("row_names", ROW_NAMES)
    best = _best_per_column(table)
    caption = table["title"] + "." + (" " + table["note"] if table.get("note") else "")
    out = ["\\begin{table}[ht]\\centering", "\\caption{" + caption.replace("%", "\\%") + "}",
           "\\begin{tabular}{l" + "c" * len(table["columns"]) + "}", "\\toprule",
           table.get("row_header", "Method").replace("M_act", "$M_{\\mathrm{act}}$") + " & "
           + " & ".join(c.replace("%", "\\%") for c in table["columns"]) + " \\\\", "\\midrule"]
    for row in table["rows"]:
        cells = []
        for column in table["keys"]:
            if (row, column) not in table["cells"]:
                cells.append("--")
                continue
            mean, std, _ = table["cells"][(row, column)]
            text = _cell(mean, std, table.get("digits", 2)).replace("±", "$\\pm$")
            cells.append(f"\\textbf{{{text}}}" if best.get(column) == row else text)
        name = f"{names.get(row, row)}".replace("%", "\\%")
        out.append(("\\textit{" + name + "}" if row in table.get("references", ()) else name) + " & "
                   + " & ".join(cells) + " \\\\")
    out += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(out)


def _best_per_column(table):
    best = {}
    if table.get("metric") == "activation_round":
        return best
    for column in table["keys"]:
        candidates = [(table["cells"][(row, column)][0], i, row) for i, row in enumerate(table["rows"])
                      if (row, column) in table["cells"] and row not in table.get("references", ())
                      and math.isfinite(table["cells"][(row, column)][0])]
        if candidates:
            best[column] = min(candidates)[2]
    return best


def paired_markdown(rows: list[dict]) -> str:
    lines = ["| Model | Partition | Malicious | FedLNS minus | Seeds | Best checkpoint: mean [95% CI] | FedLNS better "
             "| Last 10 rounds: mean [95% CI] | FedLNS better |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n = len(r["seeds"])
        lines.append(f"| {r['model']} | {PARTITION_NAMES[r['partition']]} | {_percent(r['fraction'])} | "
                     f"{r['against']} ({METHOD_NAMES[r['baseline']]}) | {n} | {_interval(r['best'])} | "
                     f"{r['best_wins']}/{n} | {_interval(r['last10'])} | {r['last10_wins']}/{n} |")
    return "\n".join(lines) + "\n"


def recovery_markdown(rows: list[dict]) -> str:
    lines = ["| Model | Partition | Malicious | Method | Seeds | Best: per-seed mean [95% CI] | Best: of means "
             "| Last 10: per-seed mean [95% CI] | Last 10: of means |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {PARTITION_NAMES[r['partition']]} | {_percent(r['fraction'])} | "
                     f"{METHOD_NAMES[r['method']]} | {len(r['seeds'])} | {_interval(r['best'], 2)} | "
                     f"{r['best_of_means']:.2f} | {_interval(r['last10'], 2)} | {r['last10_of_means']:.2f} |")
    return "\n".join(lines) + "\n"


def clean_cost_markdown(rows: list[dict]) -> str:
    lines = ["| Model | Partition | Method | Seeds | Best: minus FedAvg [95% CI] | Best: relative "
             "| Last 10: minus FedAvg [95% CI] | Last 10: relative | Benign clients rejected |",
             "|---|---|---|---|---|---|---|---|---|"]

    def relative(result):
        percent = {k: 100 * result[k] for k in ("mean", "low", "high")}
        return _interval(percent) + " %"

    for r in rows:
        lines.append(f"| {r['model']} | {PARTITION_NAMES[r['partition']]} | {METHOD_NAMES[r['method']]} | "
                     f"{len(r['seeds'])} | {_interval(r['best'])} | {relative(r['best_relative'])} | "
                     f"{_interval(r['last10'])} | {relative(r['last10_relative'])} | "
                     + (_pct(r["fpr"]) if r["selects_clients"] else "–") + " |")
    return "\n".join(lines) + "\n"


def glance_markdown(summaries: list[dict], paired: list[dict], recovered: list[dict]) -> str:
    """One row per attacked setting: FedAvg, the strongest baseline, FedLNS (with its pooled TPR/FPR and its
    recovery), and the references, as mean best-checkpoint / mean last-10 perplexity over FedLNS's seeds at that
    setting (the clean run too: the fraction sweep has fewer seeds than the 40% comparison); empty when FedLNS or
    FedAvg did not run."""
    main = main_runs(summaries)
    groups = _group(main, ("family", "partition", "fraction", "method"))
    strongest = {(r["family"], r["partition"], r["fraction"]): r["baseline"] for r in paired
                 if r["against"] == "strongest baseline"}
    fedlns_recovery = {(r["family"], r["partition"], r["fraction"]): r for r in recovered if r["method"] == "fedlns"}

    def both(runs):
        if not runs:
            return "–"
        best, last = (np.mean([s[key] for s in runs]) for key in ("perplexity", "last10_perplexity"))
        return f"{best:.0f} / {last:.0f}"

    lines = ["| Model | Partition | Malicious | Seeds | FedAvg | Strongest baseline | FedLNS | FedLNS TPR / FPR "
             "| FedLNS recovery, best [95% CI] | Oracle | Clean | Unigram |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    settings = sorted({key[:3] for key in groups if key[2] > 0 and key[3] == "fedlns"},
                      key=lambda key: _setting_order(*key))
    for family, partition, fraction in settings:
        fedlns = groups[(family, partition, fraction, "fedlns")]
        seeds = {s["seed"] for s in fedlns}

        def runs_of(method, at=fraction):   # every cell of the row over the same seeds
            return [s for s in groups.get((family, partition, at, method), []) if s["seed"] in seeds]

        fedavg = runs_of("fedavg")
        if not fedavg:
            continue
        baseline = strongest.get((family, partition, fraction))
        rates = detection_rates(**{k: sum(s[k] for s in fedlns) for k in ("tp", "fp", "fn", "tn")})
        recovery_row = fedlns_recovery.get((family, partition, fraction))
        unigram = [s["unigram_perplexity"] for s in fedlns if s["unigram_perplexity"] is not None]
        strongest_cell = (f"{METHOD_NAMES[baseline]} {both(runs_of(baseline))}"
                          if baseline else "–")
        lines.append(
            f"| {family_label(family, fedlns)} | {PARTITION_NAMES[partition]} | {_percent(fraction)} | {len(fedlns)} | "
            f"{both(fedavg)} | {strongest_cell}"
            + f" | {both(fedlns)} | {_pct(rates['tpr'])} / {_pct(rates['fpr'])} | "
            + (_interval(recovery_row["best"], 2) if recovery_row else "–")
            + f" | {both(runs_of('oracle'))} | {both(runs_of('fedavg', at=0.0))} | "
            + (f"{np.mean(unigram):.0f}" if unigram else "–") + " |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def _interval(result: dict, digits: int = 1) -> str:
    if not math.isfinite(result["low"]):
        return f"{result['mean']:+.{digits}f}"
    return f"{result['mean']:+.{digits}f} [{result['low']:+.{digits}f}, {result['high']:+.{digits}f}]"


def detection_markdown(summaries: list[dict]) -> str:
    """Kept/rejected against the ground truth, summed over the rounds where a method decided; FedLNS's screening
    diagnostics beside it."""
    lines = ["| Model | Partition | Malicious | Method | Runs | TPR | FPR | Precision | Active rounds | "
             "Wrong-cluster rounds | AUC of delta | One component | Singleton component |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (family, partition, fraction, method), runs in sorted(
            _group(main_runs(summaries), ("family", "partition", "fraction", "method")).items(),
            key=lambda item: (*_setting_order(*item[0][:3]), METHODS.index(item[0][3]))):
        if not runs[0]["selects_clients"] or method == "oracle":
            continue
        rates = detection_rates(**{k: sum(s[k] for s in runs) for k in ("tp", "fp", "fn", "tn")})
        screened = [s for s in runs if s["active_rounds"]]
        extra = ["–"] * 5
        if screened:
            aucs = [s["auc"] for s in screened if s["auc"] is not None]
            extra = [str(sum(s["active_rounds"] for s in screened)),
                     str(sum(s["wrong_cluster_rounds"] for s in screened)),
                     f"{np.mean(aucs):.3f}" if aucs else "–",
                     str(sum(s["one_component_rounds"] for s in screened)),
                     str(sum(s["singleton_rounds"] for s in screened))]
        lines.append(f"| {family_label(family, runs)} | {PARTITION_NAMES[partition]} | {_percent(fraction)} | "
                     f"{METHOD_NAMES[method]} | {len(runs)} | {_pct(rates['tpr'])} | {_pct(rates['fpr'])} | "
                     f"{_pct(rates['precision'])} | " + " | ".join(extra) + " |")
    return "\n".join(lines) + "\n"


def _pct(value):
    return "–" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def timing_markdown(summaries: list[dict]) -> str:
    """Wall time per run: client training, server aggregation, evaluation (Markdown, mean over runs)."""
    lines = ["| Model | Method | Runs | Rounds | Client training (s) | Server aggregation (s) | Evaluation (s) "
             "| Total (s) |", "|---|---|---|---|---|---|---|---|"]
    for (family, method), runs in sorted(_group(summaries, ("family", "method")).items(),
                                         key=lambda item: (FAMILIES.index(item[0][0]), METHODS.index(item[0][1]))):
        parts = [np.mean([s[k] for s in runs]) for k in ("client_time_s", "server_time_s", "eval_time_s")]
        lines.append(f"| {family_label(family, runs)} | {METHOD_NAMES[method]} | {len(runs)} | "
                     f"{np.mean([s['completed'] for s in runs]):.0f} | {parts[0]:.1f} | {parts[1]:.2f} | "
                     f"{parts[2]:.1f} | {sum(parts):.0f} |")
    return "\n".join(lines) + "\n"


def tables_csv(tables: list[dict]) -> str:
    """Long-form CSV of every table cell: title, row, column, mean, std, n_seeds."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["table", "metric", "row", "column", "mean", "std", "n_seeds"])
    for table in tables:
        names = table.get("row_names", ROW_NAMES)
        for row in table["rows"]:
            for column, label in zip(table["keys"], table["columns"]):
                if (row, column) in table["cells"]:
                    mean, std, n = table["cells"][(row, column)]
                    writer.writerow([table["title"], table["metric"], names.get(row, row), label, mean, std, n])
    return buffer.getvalue()


# ------------------------------------------------------------------------------------------ entry point

def write_report(root: str | Path, out: str | Path, plots: bool = True, allow_mixed_code: bool = False) -> dict:
    """Write ``tables.md``, ``tables.tex``, ``tables.csv``, ``runs.csv`` and the PNG plots into ``out``.

    Raises ``FileNotFoundError`` when ``root`` holds no finished run and :class:`MixedCodeError` when its runs
    were made by different code (unless ``allow_mixed_code``).
    """
    summaries = load_runs(root)
    if not summaries:
        raise FileNotFoundError(f"no finished run under {root}")
    code = None if allow_mixed_code else check_same_code(summaries)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # run folders without a finished run's records (in progress, failed, or damaged): named, never silently dropped
    kept = {s["run"] for s in summaries}
    left_out = sorted(path.parent.name for path in Path(root).rglob("config.json") if path.parent.name not in kept)
    tables = fraction_tables(summaries) + gmm_tables(summaries) + bank_tables(summaries)
    paired, recovered = paired_rows(summaries), recovery_rows(summaries)
    sources = sorted({s["data_source"] for s in summaries if s["data_source"]})
    made_by = ("code of several versions (--allow-mixed-code)" if code is None else
               f"fedlns-core {code['version']}, source hash `{code['source']}`, commit "
               f"`{(code['commit'] or 'unknown')[:12]}`" + (" with uncommitted changes" if code["dirty"] else ""))
    markdown = ["# Results", "",
                f"Made by `fedlns_sim.report` from the run files under `{Path(root).name}/` ({len(summaries)} finished "
                f"runs" + (f"; {len(left_out)} left out, unfinished or without records" if left_out else "")
                + f"), all run by {made_by}, on {_machines_text(summaries)}. "
                "Per seed, the checkpoint with the lowest evaluation loss (best) and the mean of the last 10 rounds "
                "(for perplexity: exp of the mean loss); mean ± sample standard deviation over seeds (no ± with one "
                "seed). References in italics: *Oracle* averages the round's benign clients only (it reads the "
                "ground truth); *Clean* is FedAvg with no malicious client; *Unigram* is an add-one unigram model "
                "of the training tokens.", "", "Data: " + "; ".join(sources), ""]
    glance = glance_markdown(summaries, paired, recovered)
    if glance:
        markdown += ["## At a glance", "",
                     "Perplexity, mean over seeds of the best checkpoint / of the last-10-round mean. Strongest "
                     "baseline: the lowest mean best-checkpoint perplexity of the baselines run at that setting. "
                     "Every cell of a row is over the row's seeds. TPR/FPR pooled over the seeds' decided rounds. "
                     "Recovery: (FedAvg - FedLNS) / (FedAvg - Oracle), per seed, mean and 95% t interval. Clean: "
                     "FedAvg with no attacker.", "", glance]
    markdown += [to_markdown(t) for t in tables]
    if paired:
        markdown += ["## FedLNS against the strongest baseline, paired by seed", "",
                     "Perplexity of FedLNS minus the other method's, per seed; mean and 95% t interval over seeds "
                     "(negative: FedLNS better). The strongest baseline is the one with the lowest mean "
                     "best-checkpoint perplexity at that setting.", "", paired_markdown(paired)]
    if recovered:
        markdown += ["## Recovery: (FedAvg - method) / (FedAvg - Oracle)", "",
                     "1 = as good as averaging the benign clients only, 0 = no better than FedAvg under attack. "
                     "Per-seed values with a 95% t interval, and the ratio of the seed means.", "",
                     recovery_markdown(recovered)]
    clean_cost = clean_cost_rows(summaries)
    if clean_cost:
        markdown += ["## What each defence costs without attackers (0% malicious)", "",
                     "Perplexity of the defence minus clean FedAvg's (FedAvg at 0%), per seed; mean and 95% t "
                     "interval over seeds, absolute and relative to FedAvg (positive: the defence is worse). "
                     "Benign clients rejected: pooled over the decided rounds, for methods that pick clients.", "",
                     clean_cost_markdown(clean_cost)]
    matrix = attack_matrix(summaries)
    if matrix:
        markdown += ["## Robustness matrix: attack x method", "",
                     "Perplexity, mean ± std over seeds; *rec* = recovery (FedAvg - method) / "
                     "(FedAvg - Oracle) under the same attack, mean over seeds, left out where the attack did not "
                     "raise FedAvg above the oracle at every seed (then it is undefined); for methods that pick "
                     "clients, TPR/FPR pooled over seeds; for the backdoor, its success rate over the last 10 "
                     "rounds. Under each table, the references no attack changes: *Oracle* (FedAvg over the round's "
                     "benign clients only) and *Clean* (FedAvg with no attacker). `attack_matrix.png`: "
                     "best-checkpoint perplexity above the oracle's, per seed.", "",
                     attack_matrix_markdown(matrix, matrix_references(summaries))]
    markdown += ["## Detection (positive = rejected) and FedLNS's screening diagnostics", "",
                 detection_markdown(summaries), "## Wall time per run (seconds, mean over runs)", "",
                 timing_markdown(summaries)]
    (out / "tables.md").write_text("\n".join(markdown))
    (out / "tables.tex").write_text("\n".join(to_latex(t) for t in tables))
    (out / "tables.csv").write_text(tables_csv(tables))
    with open(out / "runs.csv", "w", newline="") as handle:
        fields = [k for k in summaries[0] if k not in ("curve", "early_best")]
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(summaries)
    paths = []
    if plots:
        from .plots import plot_all

        paths = plot_all(summaries, recovered, out, matrix)
    return {"tables": out / "tables.md", "plots": paths, "summaries": summaries, "table_objects": tables,
            "paired": paired, "recovery": recovered, "clean_cost": clean_cost, "matrix": matrix, "code": code,
            "left_out": left_out}
