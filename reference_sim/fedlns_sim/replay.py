"""Offline replay of FedLNS's screening from recorded signatures, under the paper's rule and variants of it.

A FedLNS run made with ``record_signatures=true`` keeps every client's signature per round
(``signatures/round-NNNN.npz``). Replaying the bank, the median/MAD reference and the mixture from those files
with ``fedlns_core``'s functions gives the paper's decisions again (``paper``, checked against the run's own
labels) or a variant's, without retraining anything. The variants isolate one suspected cause of wrong decisions:

``paper``          the rule as the run applied it (a check: it must reproduce the recorded labels)
``max_age:A``      the reference uses only bank entries at most A rounds old (stale entries, hypothesis b)
``exclude_round``  the reference leaves out this round's fresh entries, so attackers who are a local majority
                   cannot pull the median (hypothesis c)
``no_singletons``  a two-component split that isolates a single client keeps everyone (hypothesis d)

A variant left with no bank entry for its reference (e.g. ``exclude_round`` in the first active round) uses the
paper's reference in that round.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedlns_core import bic_gmm_retain, deviation_scores, median_mad, standardize

from .runfiles import read_meta, read_records

VARIANTS = ("paper", "max_age:A", "exclude_round", "no_singletons")


def load_signatures(run_dir: Path) -> dict[int, tuple[list[int], np.ndarray]]:
    """round -> (client ids, signatures of shape (n_clients, D)) of a run recorded with ``record_signatures``."""
    folder = Path(run_dir) / "signatures"
    rounds = {}
    for path in sorted(folder.glob("round-*.npz")):
        with np.load(path) as stored:
            rounds[int(path.stem.split("-")[1])] = ([int(c) for c in stored["clients"]], stored["signatures"])
    if not rounds:
        raise FileNotFoundError(f"{run_dir} has no recorded signatures (run it with --set record_signatures=true)")
    return rounds


def replay(run_dir: Path, variant: str = "paper") -> list[dict]:
    """Per active round of the run: the clients each rule keeps, under ``variant``."""
    meta = read_meta(run_dir)
    config = meta["config"]
    if not config["method"].startswith("fedlns"):
        raise ValueError(f"{run_dir} is a {config['method']} run, not FedLNS")
    from .seeds import stream_seed

    random_state = stream_seed(config["seed"], "screening")
    threshold = int(round(config["activation_coverage"] * config["num_clients"]))
    components = "two" if config["method"] == "fedlns_two" else "bic"
    name, _, argument = variant.partition(":")
    records = {r["round"]: r for r in read_records(run_dir)}
    bank: dict[int, tuple[int, np.ndarray]] = {}              # client -> (round written, signature)
    decisions = []
    for index, (t, (clients, signatures)) in enumerate(sorted(load_signatures(run_dir).items())):
        previous = dict(bank)
        bank.update({c: (t, row) for c, row in zip(clients, signatures)})
        if len(bank) < threshold:
            continue
        if name == "exclude_round":
            entries = [row for c, (written, row) in previous.items()]
        elif name == "max_age":
            entries = [row for written, row in bank.values() if t - written <= int(argument)]
        elif name in ("paper", "no_singletons"):
            entries = [row for _, row in bank.values()]
        else:
            raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        if not entries:   # nothing old enough or nothing from before this round: the paper's reference
            entries = [row for _, row in bank.values()]
        median, mad = median_mad(np.stack(entries, axis=1), 1e-6)       # (D,), (D,)
        features = standardize(signatures, median, mad)                   # (N, D)
        scores = deviation_scores(features)
        seed = int(np.random.SeedSequence([random_state, index]).generate_state(1)[0])   # the screener's per round
        decision = bic_gmm_retain(features, scores, components=components, random_state=seed)
        labels = decision.labels
        if name == "no_singletons" and decision.n_components == 2 and min(labels.sum(), len(labels) - labels.sum()) == 1:
            labels = np.zeros_like(labels)
        record = records.get(t, {})
        decisions.append({"round": t, "clients": clients, "kept": [c for c, k in zip(clients, labels) if k == 0],
                          "malicious": [c for c in clients if c in set(record.get("malicious_sampled", []))],
                          "n_components": decision.n_components, "recorded_kept": record.get("kept")})
    return decisions


def summarize(decisions: list[dict]) -> dict:
    """Detection totals and rates, wrong-cluster rounds and (for checking) agreement with the recorded run."""
    tp = fp = fn = tn = wrong = agree = 0
    for d in decisions:
        bad, kept = set(d["malicious"]), set(d["kept"])
        rejected = set(d["clients"]) - kept
        tp += len(rejected & bad)
        fp += len(rejected - bad)
        fn += len(kept & bad)
        tn += len(kept - bad)
        if rejected and kept and len(rejected & bad) / len(rejected) < len(kept & bad) / len(kept):
            wrong += 1
        agree += d["recorded_kept"] is not None and sorted(d["recorded_kept"]) == sorted(kept)
    return {"rounds": len(decisions), "tpr": tp / max(tp + fn, 1), "fpr": fp / max(fp + tn, 1),
            "wrong_cluster_rounds": wrong, "agree_with_run": agree}


def main(argv=None) -> int:
    """``python -m fedlns_sim.replay RUN_DIR... [--variants paper,max_age:5,...]``: one JSON line per run and
    variant."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m fedlns_sim.replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="FedLNS run folders recorded with record_signatures=true")
    parser.add_argument("--variants", default="paper,max_age:5,max_age:10,exclude_round,no_singletons",
                        help="comma-separated variants (default: %(default)s)")
    args = parser.parse_args(argv)
    for run_dir in args.runs:
        for variant in args.variants.split(","):
            print(json.dumps({"run": Path(run_dir).name, "variant": variant,
                              **summarize(replay(Path(run_dir), variant))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
