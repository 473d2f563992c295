"""Offline replay of FedLNS's screening from recorded signatures reproduces the run, and its variants differ."""

import json

import numpy as np

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.replay import main, replay, summarize  # noqa: E402
from fedlns_sim.run import run  # noqa: E402


def recorded_run(tmp_path_factory, **settings):
    """A smoke-preset run with every round's signatures recorded."""
    config = make_config(
        "smoke", "gpt", data="synthetic", record_signatures=True, **{"rounds": 8, "num_clients": 10, **settings}
    )
    return run(config, tmp_path_factory.mktemp("runs"), progress=False)


def reproduced(run_dir, variant, min_rounds):
    """The replay's decisions under ``variant``, checked to be the run's own in at least ``min_rounds`` rounds."""
    decisions = replay(run_dir, variant)
    summary = summarize(decisions)
    assert summary["rounds"] >= min_rounds and summary["agree_with_run"] == summary["rounds"]
    return decisions


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return recorded_run(tmp_path_factory, method="fedlns", activation_coverage=0.3)


def test_paper_replay_reproduces_every_recorded_decision(recorded):
    decisions = reproduced(recorded, "paper", 5)
    assert all(sorted(d["kept"]) == sorted(d["recorded_kept"]) for d in decisions)


def test_variants_run_and_change_only_the_reference(recorded):
    paper = replay(recorded, "paper")
    young = replay(recorded, "max_age:0")  # only this round's entries: a different reference
    assert [d["round"] for d in young] == [d["round"] for d in paper]
    assert replay(recorded, "max_age:100") == paper  # no entry is that old: the paper's rule exactly
    for variant in ("exclude_round", "no_singletons"):
        assert len(replay(recorded, variant)) == len(paper)
    with pytest.raises(ValueError, match="unknown variant"):
        replay(recorded, "median_of_means")


def test_command_prints_one_json_line_per_variant(recorded, capsys):
    assert main([str(recorded), "--variants", "paper,exclude_round"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["variant"] for line in lines] == ["paper", "exclude_round"]
    assert lines[0]["agree_with_run"] == lines[0]["rounds"]


def test_hypotheses_table_over_recorded_runs(recorded, capsys):
    assert main([str(recorded), "--hypotheses", "--variants", "paper,exclude_round"]) == 0
    table = capsys.readouterr().out
    assert "| gpt | iid | 2 | 1 |" in table and "paper: TPR / FPR / wrong" in table


def test_guarded_variant_is_the_screeners_guarded_rule(recorded):
    from fedlns_core import FedLNS, NormSelector
    from fedlns_sim.replay import load_signatures
    from fedlns_sim.runfiles import read_meta
    from fedlns_sim.seeds import stream_seed

    config = read_meta(recorded)["config"]
    threshold = int(round(config["activation_coverage"] * config["num_clients"]))
    screener = FedLNS.paper(
        activation_threshold=threshold,
        random_state=stream_seed(config["seed"], "screening"),
        retain_rule="guarded",
        lone_separation=2.0,
        min_separation=0.5,
        mixture_solver=config["mixture_solver"],
    )
    expected = []
    for t, (clients, signatures) in sorted(load_signatures(recorded).items()):
        names = [f"ln.{j:06d}" for j in range(signatures.shape[1])]  # sorted = recorded order
        screener.selector = NormSelector(keys=names)
        params = {c: {name: row[j : j + 1] for j, name in enumerate(names)} for c, row in zip(clients, signatures)}
        result = screener.screen({name: np.zeros(1) for name in names}, params, {c: 1.0 for c in clients})
        if result.active:
            expected.append((t, sorted(result.retained)))
    replayed = [(d["round"], sorted(d["kept"])) for d in replay(recorded, "guarded:2:0.5")]
    assert replayed == expected and len(expected) >= 5


@pytest.fixture(scope="module")
def recorded_default(tmp_path_factory):
    return recorded_run(tmp_path_factory, method="fedlns_default", malicious_fraction=0.4)


@pytest.fixture(scope="module")
def recorded_cohort(tmp_path_factory):
    return recorded_run(tmp_path_factory, method="fedlns_default", malicious_fraction=0.4, participation=1.0, rounds=10)


def test_cohort_replay_reproduces_every_recorded_decision(recorded_cohort):
    decisions = reproduced(recorded_cohort, "cohort", 3)
    assert replay(recorded_cohort) == decisions  # 10 per round: FedLNS()'s cohort rule
    assert [d["round"] for d in replay(recorded_cohort, "support")] == [d["round"] for d in decisions]


def test_cohort_replay_gives_each_clients_sides_and_the_default_vote_reads_them_with_the_rounds_edges(
    recorded_cohort, capsys
):
    decisions = replay(recorded_cohort, "cohort")
    cut = 0
    for d in decisions:
        assert set(d["sides"]) == set(d["clients"])
        assert all(before in (-1, 0, 1) and after in (-1, 0, 1) for before, after in d["sides"].values())
        rejected, kept = set(d["clients"]) - set(d["kept"]), set(d["kept"])
        if rejected and kept:  # a split round: the rejected part's vote, by the sides with the round's edges
            cut += 1
            vote = {name: sum(d["sides"][c][1] for c in part) for name, part in (("out", rejected), ("in", kept))}
            assert vote["out"] < 0 and vote["out"] <= vote["in"]
    assert cut >= 1
    for d in decisions:  # the whole graph's cohorts by kind: the round's own placed clients are among them
        placed = {kind: [sum(1 for c in d["clients"] if d["sides"][c][1] == sign and (c in d["malicious"]) == bad)
                         for bad in (False, True)] for kind, sign in (("majority", 1), ("minority", -1))}
        for kind in ("majority", "minority"):
            assert all(whole >= own for whole, own in zip(d["cohorts"][kind], placed[kind]))
    assert any(d["cohorts"]["minority"][1] > 0 for d in decisions)  # the graph places attackers in the minority
    only = [d["round"] for d in decisions if d["kept"] and set(d["kept"]) <= set(d["malicious"])]
    assert summarize(decisions)["attackers_only_rounds"] == only
    assert main([str(recorded_cohort), "--variants", "cohort", "--per-round"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["round"] for line in lines] == [d["round"] for d in decisions]
    assert lines[0]["sides"] == {str(c): sides for c, sides in decisions[0]["sides"].items()}


def test_cohort_replay_takes_the_undecided_setting(recorded_cohort, monkeypatch):
    """``cohort:keep`` keeps a round no cohort can decide whole; ``hold``, ``deviation`` and ``hold_contested``
    reject more there and nothing less anywhere (the cohort graph learns from the cuts alone, so the rounds'
    histories are the same)."""
    import fedlns_sim.replay as replay_module

    settings = []

    def spy(*args, **kwargs):
        settings.append(kwargs["undecided"])
        return rule(*args, **kwargs)

    rule = replay_module.cohort_rule
    monkeypatch.setattr(replay_module, "cohort_rule", spy)
    keep = replay(recorded_cohort, "cohort:keep")
    assert set(settings) == {"keep"}
    for other in ("cohort:hold", "cohort:deviation", "cohort:hold_contested"):
        settings.clear()
        decisions = replay(recorded_cohort, other)
        assert set(settings) == {other.split(":")[1]}
        assert [d["round"] for d in decisions] == [d["round"] for d in keep]
        for mine, kept_whole in zip(decisions, keep):
            assert set(mine["kept"]) <= set(kept_whole["kept"])
    settings.clear()
    replay(recorded_cohort, "cohort:agreeing+hold")  # settings joined by +
    assert set(settings) == {"hold"}
    with pytest.raises(ValueError, match="cohort:C takes one or more"):
        replay(recorded_cohort, "cohort:sometimes")
    with pytest.raises(ValueError, match="cohort:C takes one or more"):
        replay(recorded_cohort, "cohort:hold+sometimes")
    margins = []
    monkeypatch.setattr(replay_module, "cohort_rule", lambda *a, **k: margins.append(k["margin"]) or rule(*a, **k))
    loose = replay(recorded_cohort, "cohort:keep+margin=1")  # a part is rejected only wholly in the minority
    assert set(margins) == {1.0}
    for mine, any_vote in zip(loose, keep):
        assert set(any_vote["kept"]) <= set(mine["kept"])
    with pytest.raises(ValueError, match="margin=M once"):
        replay(recorded_cohort, "cohort:margin=0.5+margin=1")
    balances = []
    monkeypatch.setattr(replay_module, "cohort_rule", lambda *a, **k: balances.append(k["balance"]) or rule(*a, **k))
    replay(recorded_cohort, "cohort:balance=0.8")
    assert set(balances) == {0.8}
    with pytest.raises(ValueError, match="balance=M once"):
        replay(recorded_cohort, "cohort:balance=0.8+balance=0.5")
    for argument, option, value, unknown in (
        ("contested_round", "contested", "reject", "drop"),
        ("strong_minority", "minority", "reject", "keep"),
        ("open_round_rule", "open", "keep", "hold"),
    ):  # the settings a variant names by OPTION=VALUE reach the rule; an unknown value is an error
        seen = []
        monkeypatch.setattr(
            replay_module, "cohort_rule", lambda *a, key=argument, **k: seen.append(k[key]) or rule(*a, **k)
        )
        replay(recorded_cohort, f"cohort:{option}={value}")
        assert set(seen) == {value}
        with pytest.raises(ValueError, match=f"{option}=C"):
            replay(recorded_cohort, f"cohort:{option}={unknown}")


def test_support_replay_reproduces_every_recorded_decision(recorded_default):
    decisions = reproduced(recorded_default, "support", 3)
    assert replay(recorded_default) == decisions  # a fedlns_default run replays its own rule
    split = replay(recorded_default, "round_first:0.75")
    assert [d["round"] for d in split] == [d["round"] for d in decisions]
    with pytest.raises(ValueError, match="unknown variant"):
        replay(recorded_default, "max_age:3")
