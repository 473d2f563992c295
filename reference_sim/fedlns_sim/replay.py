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
``guarded:L:S``    ``FedLNS(retain_rule="guarded", lone_separation=L, min_separation=S)`` (``guarded`` alone:
                   L=3, S=0, what ``rule_for_round_size`` gives from 15 per round; docs/rules.md)

A variant left with no bank entry for its reference (e.g. ``exclude_round`` in the first active round) uses the
paper's reference in that round.

A run of ``FedLNS()``'s rule (method ``fedlns_default``) also records each client's update sketch; its bank
(signature, sketch, round and score per client) is rebuilt the same way and the rule replayed (by default the
run's own: a check, it must reproduce the recorded decisions):

``cohort``         the default rule: each round cut in two by its own sketches, the side decided by the cohort
                   graph of client ids (``fedlns_core._cohort``), built from the recorded rounds
``cohort:C``       the same with ``cohort_cut=C`` (``tree``, ``significant``, ``confirmed`` or ``centered``),
                   ``cohort_vote=C`` (``round``, ``history``, ``strong``, ``placed`` or ``settled``),
                   ``cohort_undecided=C`` (``keep``, ``hold``, ``deviation``, ``hold_contested`` or ``adaptive``;
                   ``support`` is the run's fallback below) or ``cohort_weight=C`` (``unit``, ``coherence`` or
                   ``agreeing``) instead of the run's own, or ``margin=M`` (``cohort_margin``), ``balance=B``
                   (``cohort_balance``) or ``contested=C``
                   (``cohort_contested``: ``hold`` or ``reject``), ``minority=C`` (``cohort_strong_minority``:
                   ``support`` or ``reject``) or ``open=C`` (``cohort_open``: ``support`` or ``keep``); several
                   joined by ``+``
                   (``cohort:agreeing+hold_contested``, ``cohort:settled+margin=0.5``, ``cohort:contested=reject``)
``support``        the default before it: groups of the recent bank entries' sketches
``round_first:T``  the round is first cut in two by its own cosines; the part with the lower mean support (cosine
                   to the earlier entries of the population's majority group) is rejected when it is apart from
                   the other (mean cosine across below T times its own within); a round without such a part is
                   decided by ``support``. Studied for BERT, not adopted (docs/attacks.md, "Where it fails").
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from fedlns_core import MixtureDecision, bic_gmm_retain, deviation_scores, median_mad, standardize
from fedlns_core._cohort import CohortGraph, CohortOutcome, cohort_rule
from fedlns_core._rules import RuleOutcome, guarded_rule
from fedlns_core._settings import PARAMETER_CONSTRAINTS, Interval, options
from fedlns_core._support import SupportOutcome, _unit, recent_rows, support_rule

from .report.stats import kept_attackers_only
from .runfiles import read_meta, read_records

VARIANTS = ("paper", "max_age:A", "exclude_round", "no_singletons", "guarded:L:S")
SUPPORT_VARIANTS = ("cohort", "cohort:C", "support", "round_first:T")


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


def _run_config(run_dir: Path) -> dict:
    """The config a run folder records; a folder without one is no run."""
    meta = read_meta(run_dir)
    if meta is None:
        raise FileNotFoundError(f"{run_dir} has no config.json: not a run folder")
    return meta["config"]


def replay(run_dir: Path, variant: str | None = None) -> list[dict]:
    """Per active round of the run: the clients each rule keeps, under ``variant`` (default: the run's own rule,
    ``paper`` or, for a ``fedlns_default`` run, ``support``)."""
    config = _run_config(run_dir)
    if not config["method"].startswith("fedlns"):
        raise ValueError(f"{run_dir} is a {config['method']} run, not FedLNS")
    if config["method"] == "fedlns_default":
        if variant is None:  # the rule the run's screener had
            from .config import config_from_dict
            from .methods import make_screener

            variant = make_screener(config_from_dict(config)).retain_rule
        return replay_support(run_dir, variant)
    variant = variant or "paper"
    from .seeds import stream_seed

    random_state = stream_seed(config["seed"], "screening")
    threshold = int(round(config["activation_coverage"] * config["num_clients"]))
    components = "two" if config["method"] == "fedlns_two" else "bic"
    solver = config.get("mixture_solver", "sklearn")  # runs from before the setting used scikit-learn
    name, _, argument = variant.partition(":")
    records = {r["round"]: r for r in read_records(run_dir)}
    bank: dict[int, tuple[int, np.ndarray]] = {}  # client -> (round written, signature)
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
        elif name in ("paper", "no_singletons", "guarded"):
            entries = [row for _, row in bank.values()]
        else:
            raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        if not entries:  # nothing old enough or nothing from before this round: the paper's reference
            entries = [row for _, row in bank.values()]
        median, mad = median_mad(np.stack(entries, axis=1), 1e-6)  # (D,), (D,)
        features = standardize(signatures, median, mad)  # (N, D)
        scores = deviation_scores(features)
        seed = int(np.random.SeedSequence([random_state, index]).generate_state(1)[0])  # the screener's per round
        decision: RuleOutcome | MixtureDecision
        if name == "guarded":
            bank_features = standardize(np.stack(entries), median, mad)  # (B, D)
            lone, _, gap = (argument or "3").partition(":")
            outcome = guarded_rule(
                features,
                bank_features,
                lone_separation=float(lone),
                min_separation=float(gap or 0.0),
                components=components,
                random_state=seed,
                solver=solver,
            )
            decision = outcome
            labels = (~outcome.retained).astype(int)
        else:
            decision = bic_gmm_retain(features, scores, components=components, random_state=seed, solver=solver)
            labels = decision.labels
        if (
            name == "no_singletons"
            and decision.n_components == 2
            and min(labels.sum(), len(labels) - labels.sum()) == 1
        ):
            labels = np.zeros_like(labels)
        record = records.get(t, {})
        decisions.append(
            {
                "round": t,
                "clients": clients,
                "kept": [c for c, k in zip(clients, labels) if k == 0],
                "malicious": [c for c in clients if c in set(record.get("malicious_sampled", []))],
                "n_components": decision.n_components,
                "recorded_kept": record.get("kept"),
            }
        )
    return decisions


#: The ``cohort:OPTION=VALUE`` variants: per OPTION, the ``FedLNS`` setting it replays at another value and the
#: ``cohort_rule`` argument that takes it.
NAMED_VARIANTS = {
    "margin": ("cohort_margin", "margin"),
    "balance": ("cohort_balance", "balance"),
    "contested": ("cohort_contested", "contested_round"),
    "minority": ("cohort_strong_minority", "strong_minority"),
    "open": ("cohort_open", "open_round_rule"),
}

#: Of those, the ones whose VALUE is a number (their setting's constraint an interval, not a set of strings).
NUMBER_VARIANTS = tuple(
    option
    for option, (setting, _) in NAMED_VARIANTS.items()
    if any(isinstance(constraint, Interval) for constraint in PARAMETER_CONSTRAINTS[setting])
)


def replay_support(run_dir: Path, variant: str = "support") -> list[dict]:
    """Per screened round of a ``fedlns_default`` run: the clients ``FedLNS()``'s rule keeps, under ``variant``
    (``cohort``, ``support`` or ``round_first:T``), from its recorded signatures and update sketches."""
    from .config import config_from_dict
    from .methods import make_screener

    name, _, argument = variant.partition(":")
    cuts, votes, undecided = options("cohort_cut"), options("cohort_vote"), options("cohort_undecided")
    weights = options("cohort_weight")
    chosen: list[str] = []
    named: dict[str, float | str] = {}  # OPTION -> VALUE of the cohort:OPTION=VALUE parts
    unknown = False
    for part in argument.split("+") if name == "cohort" and argument else []:
        option, equals, value = part.partition("=")
        if not equals:
            chosen.append(part)
        elif option not in NAMED_VARIANTS or option in named:
            unknown = True
        elif option in NUMBER_VARIANTS:
            named[option] = float(value)
        else:
            named[option] = value
            unknown |= value not in options(NAMED_VARIANTS[option][0])
    if unknown or any(a not in (*cuts, *votes, *undecided, *weights) for a in chosen):
        known = ", ".join(cuts + votes + undecided + weights)
        once = ", ".join(
            f"{option}=M once" if option in NUMBER_VARIANTS else f"{option}=C ({' or '.join(options(setting))}) once"
            for option, (setting, _) in NAMED_VARIANTS.items()
        )
        raise ValueError(f"unknown variant {variant!r}: cohort:C takes one or more (joined by +) of {known}, {once}")
    if name not in ("cohort", "support", "round_first"):
        raise ValueError(f"unknown variant {variant!r} for a fedlns_default run; known: {', '.join(SUPPORT_VARIANTS)}")
    screener = make_screener(config_from_dict(_run_config(run_dir)))
    named_args = {
        parameter: named.get(option, getattr(screener, setting))
        for option, (setting, parameter) in NAMED_VARIANTS.items()
    }
    recent = max(screener.activation_threshold, 3)
    records = {r["round"]: r for r in read_records(run_dir)}
    attackers = {c for r in records.values() for c in r.get("malicious_sampled", [])}  # every id that ever attacked
    bank: dict[int, list] = {}  # client -> [signature, sketch, stamp, score], in the screener's column order
    graph = CohortGraph()
    outcome: CohortOutcome | SupportOutcome  # the cohort rule's for variant cohort, else the support rule's
    decisions = []
    for t, path in sorted((int(p.stem.split("-")[1]), p) for p in (Path(run_dir) / "signatures").glob("round-*.npz")):
        with np.load(path) as stored:
            if "sketches" not in stored:
                raise FileNotFoundError(
                    f"{path} has no update sketches (recorded before they were, or by a rule that does not sketch)"
                )
            clients = [int(c) for c in stored["clients"]]
            signatures, sketches, stamp = stored["signatures"], stored["sketches"], int(stored["stamp"])
        for client, signature, sketch in zip(clients, signatures, sketches):
            bank.setdefault(client, [None] * 4)[:3] = signature, sketch, stamp
        median, mad = median_mad(np.stack([entry[0] for entry in bank.values()], axis=1), screener.mad_floor)
        scores = deviation_scores(standardize(signatures, median, mad))
        for client, score in zip(clients, scores):
            bank[client][3] = score
        record = records.get(t, {})
        position = {client: index for index, client in enumerate(bank)}
        entries = list(bank.values())
        bank_sketches = np.stack([entry[1] for entry in entries])
        stamps = np.array([entry[2] for entry in entries], dtype=float)
        bank_scores = np.array([entry[3] for entry in entries])
        if name == "cohort":  # the graph learns from every round, warm-up included
            before = graph  # graphs are immutable: the history before the round's edges
            outcome = cohort_rule(
                scores,
                sketches,
                clients,
                graph,
                stamps,
                bank_scores,
                recent=recent,
                separation=screener.separation,
                loud_separation=screener.loud_separation,
                decay=screener.cohort_decay,
                undecided=_pick(chosen, undecided, screener.cohort_undecided),
                cohort_cut=_pick(chosen, cuts, screener.cohort_cut),
                vote=_pick(chosen, votes, screener.cohort_vote),
                weight=_pick(chosen, weights, screener.cohort_weight),
                **named_args,
                decide=bool(record.get("active")),
                bank_sketches=bank_sketches,
            )
            graph, staged = outcome.graph.restricted(list(bank)), outcome.graph  # staged: what the vote read
        if not record.get("active"):
            continue
        if name == "cohort" and not (isinstance(outcome, CohortOutcome) and outcome.to_support):
            retained = outcome.retained
        else:  # the support rule, or the cohort rule's fallback for a round it cannot decide
            outcome = support_rule(
                scores,
                sketches,
                bank_sketches,
                np.array([position[c] for c in clients]),
                stamps,
                bank_scores,
                recent=recent,
                max_groups=screener.max_groups,
                separation=screener.separation,
                loud_separation=screener.loud_separation,
            )
            retained = outcome.retained
        if name == "round_first":
            rows = recent_rows(stamps, recent)
            retained = _round_first(outcome, sketches, bank_sketches[rows], stamps[rows], stamp, float(argument))
        malicious = set(record.get("malicious_sampled", []))
        decision = {
            "round": t,
            "clients": clients,
            "kept": [c for c, k in zip(clients, retained) if k],
            "malicious": [c for c in clients if c in malicious],
            "n_components": None,
            "recorded_kept": record.get("kept"),
        }
        if name == "cohort":  # each client's side in the graph before the round's edges and with them (+1/-1/0)
            history, voted = before.sides(), staged.sides()
            decision["sides"] = {c: [history.get(c, 0), voted[c]] for c in clients}
            # Whom the graph with the round's edges puts in the majority cohort and the minority: [honest, attackers].
            decision["cohorts"] = {
                side: [
                    sum(1 for c, s in voted.items() if s == sign and c not in attackers),
                    sum(1 for c, s in voted.items() if s == sign and c in attackers),
                ]
                for side, sign in (("majority", 1), ("minority", -1))
            }
        decisions.append(decision)
    return decisions


def _pick(chosen: list[str], allowed: tuple[str, ...], default: str) -> str:
    """The last of a variant's ``chosen`` settings that is one of ``allowed``, else ``default``."""
    return next((c for c in reversed(chosen) if c in allowed), default)


def _round_first(outcome, sketches, window_sketches, window_stamps, stamp, threshold):
    """The ``round_first:T`` variant's decision: the rule's own, unless one cut of the round by its cosines leaves
    a less supported part apart from the other (then that part is rejected, loud clients too). ``outcome`` is the
    rule's decision, whose population groups are those of the recent bank entries ``window_*``."""
    groups = outcome.groups
    earlier = groups.majority & (window_stamps < stamp) if groups is not None else None
    if earlier is None or not earlier.any() or len(sketches) < 3:
        return outcome.retained
    round_units = _unit(sketches)
    support = (round_units @ _unit(window_sketches[earlier]).T).mean(axis=1)
    cosines = round_units @ round_units.T
    part = fcluster(linkage(squareform(1.0 - np.clip(cosines, -1.0, 1.0), checks=False), "average"), 2, "maxclust") == 1
    worse = part if support[part].mean() < support[~part].mean() else ~part
    size = int(worse.sum())
    if size < 2:
        return outcome.retained
    within = (cosines[np.ix_(worse, worse)].sum() - size) / (size * (size - 1))
    if not cosines[np.ix_(worse, ~worse)].mean() < threshold * within:
        return outcome.retained
    return ~worse & ~outcome.loud


def summarize(decisions: list[dict]) -> dict:
    """Detection totals and rates, wrong-cluster rounds, the rounds that kept attackers only and (for checking)
    agreement with the recorded run."""
    tp = fp = fn = tn = wrong = agree = 0
    attackers_only = []
    for d in decisions:
        bad, kept = set(d["malicious"]), set(d["kept"])
        if kept_attackers_only(kept, bad):
            attackers_only.append(d["round"])
        rejected = set(d["clients"]) - kept
        tp += len(rejected & bad)
        fp += len(rejected - bad)
        fn += len(kept & bad)
        tn += len(kept - bad)
        if rejected and kept and len(rejected & bad) / len(rejected) < len(kept & bad) / len(kept):
            wrong += 1
        agree += d["recorded_kept"] is not None and sorted(d["recorded_kept"]) == sorted(kept)
    return {
        "rounds": len(decisions),
        "tpr": tp / max(tp + fn, 1),
        "fpr": fp / max(fp + tn, 1),
        "wrong_cluster_rounds": wrong,
        "attackers_only_rounds": attackers_only,
        "agree_with_run": agree,
    }


def round_facts(run_dir: Path) -> list[dict]:
    """Per active round of a FedLNS run, from its records: attackers in the round, whether the mixture kept the
    wrong side, whether a split isolated one client, the bank's median entry age, and the round's AUC of delta."""
    from .report.stats import auc

    facts = []
    for r in read_records(run_dir):
        if not r.get("delta"):
            continue
        bad = {str(c) for c in r["malicious_sampled"]}
        rejected = [c for c, label in r["label"].items() if label != 0]
        kept = [c for c, label in r["label"].items() if label == 0]
        share = lambda clients: sum(c in bad for c in clients) / len(clients)  # noqa: E731, B023 - used in this iteration
        attackers = [d for c, d in r["delta"].items() if c in bad]
        benign = [d for c, d in r["delta"].items() if c not in bad]
        facts.append(
            {
                "attackers": len(bad),
                "clients": len(r["delta"]),
                "wrong": bool(rejected and kept and share(rejected) < share(kept)),
                "missed": bool(bad) and not rejected,
                "singleton": r.get("n_components") == 2 and min(len(rejected), len(kept)) == 1,
                "bank_age": (r.get("bank_age") or {}).get("median"),
                "auc": auc(attackers, benign) if attackers and benign else None,
            }
        )
    return facts


def hypotheses(run_dirs: list[Path], variants=("paper", "max_age:5", "exclude_round", "no_singletons")) -> list[dict]:
    """One row per group of runs with the same family and local steps: the diagnostics that bear on each suspected
    cause of wrong decisions, and the replayed variants' detection rates."""
    groups: dict[tuple, list[Path]] = {}
    for run_dir in run_dirs:
        config = _run_config(run_dir)
        blocks = config["max_train_blocks"] // config["num_clients"]
        steps = config["local_epochs"] * -(-blocks // config["batch_size"])
        groups.setdefault((config["family"], config["partition"], steps), []).append(Path(run_dir))
    rows = []
    for (family, partition, steps), dirs in sorted(groups.items()):
        facts = [f for d in dirs for f in round_facts(d)]
        majority = [f for f in facts if f["attackers"] * 2 >= f["clients"]]
        minority = [f for f in facts if f["attackers"] * 2 < f["clients"]]
        ages = sorted(f["bank_age"] for f in facts if f["bank_age"] is not None)
        cut = ages[len(ages) // 2] if ages else None
        stale = [f for f in facts if cut is not None and f["bank_age"] is not None and f["bank_age"] > cut]
        fresh = [f for f in facts if cut is not None and f["bank_age"] is not None and f["bank_age"] <= cut]
        rate = lambda rounds: sum(f["wrong"] for f in rounds) / len(rounds) if rounds else float("nan")  # noqa: E731
        row = {
            "family": family,
            "partition": partition,
            "steps": steps,
            "runs": len(dirs),
            "rounds": len(facts),
            "auc": float(np.mean([f["auc"] for f in facts if f["auc"] is not None])),
            "wrong": rate(facts),
            "wrong_majority": rate(majority),
            "majority_rounds": len(majority),
            "wrong_minority": rate(minority),
            "wrong_stale": rate(stale),
            "wrong_fresh": rate(fresh),
            "singleton_rounds": sum(f["singleton"] for f in facts),
            "wrong_singleton": rate([f for f in facts if f["singleton"]]),
        }
        for variant in variants:
            totals = [summarize(replay(d, variant)) for d in dirs]
            n = sum(t["rounds"] for t in totals)
            row[variant] = {
                "tpr": float(np.mean([t["tpr"] for t in totals])),
                "fpr": float(np.mean([t["fpr"] for t in totals])),
                "wrong": sum(t["wrong_cluster_rounds"] for t in totals) / max(n, 1),
                "agree": sum(t["agree_with_run"] for t in totals) / max(n, 1),
            }
        rows.append(row)
    return rows


def hypotheses_markdown(rows: list[dict]) -> str:
    variants = [k for k in rows[0] if isinstance(rows[0][k], dict)] if rows else []
    head = [
        "Family",
        "Partition",
        "Steps",
        "Runs",
        "Active rounds",
        "AUC of delta",
        "Wrong-cluster rounds",
        "... attackers >= half",
        "... fewer",
        "... bank older than median",
        "... younger",
        "Singleton splits",
        *[f"{v}: TPR / FPR / wrong" for v in variants],
    ]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    pct = lambda x: "–" if np.isnan(x) else f"{100 * x:.0f}%"  # noqa: E731
    for r in rows:
        cells = [
            r["family"],
            r["partition"],
            str(r["steps"]),
            str(r["runs"]),
            str(r["rounds"]),
            f"{r['auc']:.3f}",
            pct(r["wrong"]),
            f"{pct(r['wrong_majority'])} of {r['majority_rounds']}",
            pct(r["wrong_minority"]),
            pct(r["wrong_stale"]),
            pct(r["wrong_fresh"]),
            f"{r['singleton_rounds']} ({pct(r['wrong_singleton'])} wrong)",
        ]
        cells += [f"{r[v]['tpr']:.2f} / {r[v]['fpr']:.2f} / {pct(r[v]['wrong'])}" for v in variants]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """``python -m fedlns_sim.replay RUN_DIR... [--variants paper,max_age:5,...]``: one JSON line per run and
    variant."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m fedlns_sim.replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", help="FedLNS run folders recorded with record_signatures=true")
    parser.add_argument(
        "--variants",
        default="paper,max_age:5,max_age:10,exclude_round,no_singletons",
        help="comma-separated variants (default: %(default)s; a fedlns_default run: support, round_first:T)",
    )
    parser.add_argument(
        "--hypotheses",
        action="store_true",
        help="one Markdown table over all the runs, grouped by family, partition and local steps",
    )
    parser.add_argument(
        "--per-round",
        action="store_true",
        help="one JSON line per decided round instead of a summary (a cohort variant adds each client's side in the "
        "cohort graph before the round's edges and with them, and how many honest and attacking ids the graph with "
        "them places in the majority cohort and in the minority)",
    )
    args = parser.parse_args(argv)
    if args.hypotheses:
        print(hypotheses_markdown(hypotheses([Path(r) for r in args.runs], tuple(args.variants.split(",")))))
        return 0
    for run_dir in args.runs:
        for variant in args.variants.split(","):
            decisions = replay(Path(run_dir), variant)
            for line in decisions if args.per_round else [summarize(decisions)]:
                print(json.dumps({"run": Path(run_dir).name, "variant": variant, **line}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
