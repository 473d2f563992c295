"""Runs read into one summary per run, and the code and machines that made them.

Runs come from a runs folder or an archive (``fedlns_sim.runstore.stored_runs``): per run, ``config.json`` and
``rounds.jsonl``. Per seed, the checkpoint with the lowest evaluation loss gives loss, perplexity and entropy (the
paper's rule), and beside it the mean of the last ten rounds (how the run ends). Runs made by different code do
not go into one table (:func:`check_same_code`).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from ..config import CORPUS_NAMES, FAMILY_CORPUS, FAMILY_NAMES
from ..runfiles import parse_records
from ..runstore import stored_runs
from .stats import (
    attackers_only_rounds,
    auc,
    best_checkpoint,
    detection_rates,
    finite_loss,
    last10_loss,
    perplexity,
    reason_rounds,
)

#: How ``fedlns_core``'s confirmed cut begins its reasons (``fedlns_core._cohort.CONFIRMED_REASON``; a test keeps the
#: two equal): not imported, because reading run files must not need the core's numerical stack.
CONFIRMED_REASON = "in a group of the round that agrees more within"

PAPER_ATTACK = "target_corruption"  # also the attack of runs whose config predates the setting


class MixedCodeError(ValueError):
    """Runs made by different code were about to be put into one table."""


def reported_method(config: dict) -> str:
    """The method a run is reported as: ``fedlns_default`` runs made before the cohort rule (no ``default_rule``, or
    ``"support"``) ran the support rule, today's ``fedlns_support``."""
    if config["method"] == "fedlns_default" and config.get("default_rule", "support") == "support":
        return "fedlns_support"
    return config["method"]


def load_runs(root: str | Path, finished_only: bool = True) -> list[dict]:
    """One summary per run under ``root`` (a runs folder, an archive, or a results folder holding one): its config,
    best checkpoint, last ten rounds, detection totals, screening diagnostics and timings; beside them (not
    written to ``runs.csv``) the per-round curve, the rounds after activation that kept attackers only, the rounds
    where ``cohort_cut="confirmed"``'s cut rejected clients, the rounds a quorum held, and the run's whole config.

    Runs still in progress (fewer records than rounds) are left out unless ``finished_only=False``: a table must
    not mix a method's 40-round result with another's 12-round one.
    """
    summaries = []
    for name, files in stored_runs(root):
        meta = json.loads(files["config.json"])
        config = meta["config"]
        records = parse_records(files["rounds.jsonl"])
        trained = [r for r in records if r["round"] >= 1]
        if not trained or (finished_only and trained[-1]["round"] < config["rounds"]):
            continue
        best, last10 = best_checkpoint(records), last10_loss(records)
        last = trained[-10:]
        decided = [r for r in trained if r.get("decided") and "tp" in r]
        totals = {k: sum(r[k] for r in decided) for k in ("tp", "fp", "fn", "tn")}
        active = [r["round"] for r in trained if r.get("active", True) and r.get("decided", True)]
        code = meta.get("code") or {}
        summaries.append(
            {
                "run": name,
                "family": config["family"],
                "partition": config["partition"],
                "method": reported_method(config),
                "fraction": config["malicious_fraction"],
                "seed": config["seed"],
                "attack": config.get("attack", PAPER_ATTACK),
                "learning_rate": config["learning_rate"],
                "backdoor_asr": _mean_or_nan([r.get("backdoor_asr") for r in last]),
                "coverage": config["activation_coverage"],
                "rounds": config["rounds"],
                "completed": trained[-1]["round"],
                "best_round": best["round"],
                "eval_loss": finite_loss(best),
                "perplexity": perplexity(finite_loss(best)),
                "entropy": best["entropy"],
                "last10_eval_loss": last10,
                "last10_perplexity": perplexity(last10),
                "last10_entropy": _mean_or_nan([r.get("entropy") for r in last]),
                "initial_perplexity": perplexity(finite_loss(records[0])) if records[0]["round"] == 0 else None,
                "final_perplexity": perplexity(finite_loss(trained[-1])),
                "unigram_perplexity": meta.get("unigram_perplexity"),
                "selects_clients": any(r.get("selects_clients") for r in trained),
                **totals,
                **detection_rates(**totals),
                **screening_diagnostics(trained),
                "client_time_s": sum(r["client_time_s"] for r in trained),
                "server_time_s": sum(r["server_time_s"] for r in trained),
                "eval_time_s": sum(r["eval_time_s"] for r in trained),
                "activation_round": active[0] if active else None,
                "early_best": _early_best(trained, active[0]) if active else None,
                "curve": [(r["round"], perplexity(finite_loss(r))) for r in records],
                "attackers_only_rounds": attackers_only_rounds(records),
                "confirmed_cut_rounds": reason_rounds(records, CONFIRMED_REASON),
                "held_rounds": [r["round"] for r in trained if r.get("held")],
                "config": config,
                "corpus": config.get("corpus") or FAMILY_CORPUS[config["family"]],
                "pretrain_corpus": config.get("pretrain_corpus", ""),
                "peft": config.get("peft", ""),
                "n_parameters": meta.get("n_parameters"),
                "payload_parameters": meta.get("payload_parameters"),
                "data_source": meta.get("data_source"),
                "eval_positions": meta.get("eval_positions"),
                "code_source": code.get("source", "unknown"),
                "code_commit": code.get("commit"),
                "code_dirty": code.get("dirty"),
                "code_version": code.get("version"),
                "machine": machine_text(meta.get("machine")),
            }
        )
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
        return {
            "active_rounds": 0,
            "wrong_cluster_rounds": None,
            "auc": None,
            "one_component_rounds": None,
            "singleton_rounds": None,
        }
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
    return {
        "active_rounds": len(rounds),
        "wrong_cluster_rounds": wrong,
        "auc": float(np.mean(aucs)) if aucs else None,
        "one_component_rounds": one,
        "singleton_rounds": singleton,
    }


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
        parts = ", ".join(
            f"{source} ({len(runs)} runs, commit {(runs[0]['code_commit'] or '?')[:10]})"
            for source, runs in sorted(sources.items(), key=lambda item: -len(item[1]))
        )
        raise MixedCodeError(
            f"the runs were made by {len(sources)} versions of the code: {parts}; re-run them "
            "at one version, or pass --allow-mixed-code"
        )
    first = summaries[0]
    return {
        "source": first["code_source"],
        "commit": first["code_commit"],
        "dirty": first["code_dirty"],
        "version": first["code_version"],
    }


def machine_text(machine: dict | None) -> str:
    """A run's recorded machine (``config.json``'s ``machine``) in words: processor, kernels, torch, GPU."""
    if not machine:
        return "not recorded (runs before machine records)"
    text = f"{machine.get('cpu', '?')} ({machine.get('cpu_capability', '?')} kernels, "
    if machine.get("cpu_flags"):  # recorded since runs of the same kernels were seen to differ by extension
        text += f"{' '.join(machine['cpu_flags'])}, "
    text += f"torch {machine.get('torch', '?')}"
    return text + (f", {machine['gpu']})" if machine.get("gpu") else ")")


def machines_text(summaries: list[dict]) -> str:
    """The machines the runs were made on, with their counts when there are several (their kernels round
    differently, so a cell re-runs number for number only on its own kind)."""
    counts = Counter(s["machine"] for s in summaries).most_common()
    if len(counts) == 1:
        return counts[0][0]
    return "; ".join(f"{machine} ({n} run{'s' * (n != 1)})" for machine, n in counts)


def family_label(family: str, runs: list[dict]) -> str:
    """'GPT / WikiText' etc., or 'GPT / synthetic corpus' when the runs used the generated corpus."""
    model = FAMILY_NAMES[family].split(" /")[0]
    if runs and all((s.get("data_source") or "").startswith("synthetic") for s in runs):
        return f"{model} / synthetic corpus"
    if runs and runs[0].get("pretrain_corpus"):  # the fine-tuning scenario (finetune.py)
        peft = {"lora": "LoRA", "": "full"}.get(runs[0]["peft"], runs[0]["peft"])
        return (
            f"{model} / {CORPUS_NAMES[runs[0]['corpus']]}, {peft} fine-tuning of a "
            f"{CORPUS_NAMES[runs[0]['pretrain_corpus']]} base"
        )
    return FAMILY_NAMES[family]
