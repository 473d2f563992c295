"""Config dataclass, presets and overrides of fedlns_sim."""

import pytest

from fedlns_sim.config import Config, apply_overrides, config_from_dict, make_config, parse_override


def test_paper_preset_matches_the_appendix_tables():
    gpt, bert, llama = (make_config("paper", f) for f in ("gpt", "bert", "llama"))
    assert (gpt.n_layer, gpt.n_embd, gpt.n_head, gpt.max_position_embeddings, gpt.dropout) == (12, 256, 16, 128, 0.1)
    assert (bert.n_layer, bert.intermediate_size, bert.max_position_embeddings) == (12, 1024, 130)
    assert (llama.n_layer, llama.n_kv_head, llama.intermediate_size, llama.max_position_embeddings) == (8, 8, 1536, 256)
    assert (gpt.local_epochs, bert.local_epochs, llama.local_epochs) == (3, 3, 2)
    assert (gpt.learning_rate, llama.learning_rate, llama.eval_batches, llama.max_train_examples) == (3e-4, 1e-5, 50, 50000)
    assert gpt.num_clients == 200 and gpt.clients_per_round == 20 and gpt.activation_threshold == 100
    assert gpt.weight_decay == 0.01 and gpt.batch_size == 8 and gpt.block_size == 128 and gpt.rounds == 200


def test_cpu_preset_keeps_participation_and_activation_coverage():
    for family in ("gpt", "bert", "llama"):
        config = make_config("cpu", family)
        assert config.participation == 0.1 and config.activation_coverage == 0.5
        assert config.clients_per_round - round(0.4 * config.clients_per_round) - 2 > 0   # Multi-Krum works


def test_overrides_reject_unknown_keys_and_wrong_types():
    with pytest.raises(KeyError, match="unknown config key 'round'"):
        make_config("smoke", "gpt", round=3)
    with pytest.raises(TypeError, match="'rounds' expects int, got str"):
        apply_overrides(Config(), {"rounds": "3"})
    with pytest.raises(TypeError, match="'rounds' expects int, got bool"):
        apply_overrides(Config(), {"rounds": True})
    with pytest.raises(TypeError, match="'rounds' expects int, got float"):
        apply_overrides(Config(), {"rounds": 3.5})
    assert apply_overrides(Config(), {"learning_rate": 1}).learning_rate == 1.0
    with pytest.raises(ValueError, match="method must be one of"):
        make_config("smoke", "gpt", method="krum")
    with pytest.raises(KeyError, match="unknown preset"):
        make_config("gpu", "gpt")


def test_command_line_overrides_are_typed():
    assert parse_override("rounds=7") == ("rounds", 7)
    assert parse_override("p_corr=0.5") == ("p_corr", 0.5)
    assert parse_override("partition=noniid") == ("partition", "noniid")
    with pytest.raises(TypeError, match="'rounds' expects int, got 'many'"):
        parse_override("rounds=many")
    with pytest.raises(KeyError, match="unknown config key 'epochs'"):
        parse_override("epochs=2")
    with pytest.raises(ValueError, match="key=value"):
        parse_override("rounds")


def test_config_round_trips_through_its_json_form_and_names_runs_uniquely():
    config = make_config("cpu", "bert", method="flame", partition="noniid")
    assert config_from_dict(config.to_dict()) == config
    names = {make_config("cpu", f, method=m, seed=s).run_name()
             for f in ("gpt", "bert") for m in ("fedavg", "fedlns") for s in (100, 200)}
    assert len(names) == 8
    assert make_config("cpu", "gpt", rounds=3).run_name() != make_config("cpu", "gpt").run_name()


def test_every_preset_has_sweep_defaults():
    from fedlns_sim.cli import SWEEP_DEFAULTS
    from fedlns_sim.config import PRESETS

    assert set(SWEEP_DEFAULTS) == set(PRESETS)   # `fedlns-sim sweep --preset quick` once failed with KeyError


def test_the_reports_confirmed_cut_reason_is_the_cores():
    from fedlns_core._cohort import CONFIRMED_REASON
    from fedlns_sim.report import load

    assert load.CONFIRMED_REASON == CONFIRMED_REASON


def test_mixture_solvers_and_cohort_options_are_the_cores():
    from fedlns_core._settings import options
    from fedlns_sim.config import (
        COHORT_CONTESTED,
        COHORT_CUTS,
        COHORT_OPEN,
        COHORT_STRONG_MINORITY,
        COHORT_UNDECIDED,
        COHORT_VOTES,
        COHORT_WEIGHTS,
        MIXTURE_SOLVERS,
    )

    assert MIXTURE_SOLVERS == options("mixture_solver")
    assert COHORT_CUTS == options("cohort_cut") and COHORT_VOTES == options("cohort_vote")
    assert COHORT_WEIGHTS == options("cohort_weight")
    assert COHORT_UNDECIDED == options("cohort_undecided") and COHORT_CONTESTED == options("cohort_contested")
    assert COHORT_STRONG_MINORITY == options("cohort_strong_minority") and COHORT_OPEN == options("cohort_open")


def test_runs_made_before_the_cohort_rule_keep_their_rule_and_their_name():
    from fedlns_sim.methods import make_screener
    from fedlns_sim.report.load import reported_method

    today = Config(method="fedlns_default")
    archived = {k: v for k, v in today.to_dict().items() if k != "default_rule"}     # written before the setting
    legacy = config_from_dict(archived)
    assert legacy.default_rule == "support" and make_screener(legacy).retain_rule == "support"
    assert make_screener(today).retain_rule == "cohort"                               # 10 clients per round
    assert make_screener(Config(method="fedlns_support")).retain_rule == "support"
    assert legacy.run_name() != today.run_name()                  # a new cohort run never resumes an archived one
    assert Config(method="fedavg").run_name() == config_from_dict(
        {k: v for k, v in Config(method="fedavg").to_dict().items() if k != "default_rule"}).run_name()
    assert [reported_method(c) for c in (archived, today.to_dict(), Config(method="fedavg").to_dict())] == [
        "fedlns_support", "fedlns_default", "fedavg"]


@pytest.mark.parametrize("setting", ["cohort_undecided", "cohort_cut", "cohort_weight", "cohort_vote"])
def test_runs_made_before_a_default_changed_keep_the_old_value_and_their_name(setting):
    from fedlns_sim.config import LEGACY
    from fedlns_sim.methods import make_screener

    today, old = Config(method="fedlns_default"), LEGACY[setting]
    archived = {k: v for k, v in today.to_dict().items() if k != setting}  # written before the setting
    assert getattr(make_screener(today), setting) == getattr(today, setting) != old
    assert getattr(make_screener(config_from_dict(archived)), setting) == old
    before = Config(method="fedlns_default", **{setting: old})
    assert config_from_dict(archived).run_name() == before.run_name() != today.run_name()


def test_other_methods_keep_their_names_whatever_the_cut_and_the_vote():
    # They do not read the settings: their runs keep one name whatever they are, except under the attacks written
    # against the cut, which read it; archived runs, written with the round vote, load as they are.
    for method in ("fedavg", "fedlns", "flame"):
        assert Config(method=method).run_name() == Config(method=method, cohort_cut="tree").run_name()
        archived = {**Config(method=method).to_dict(), "cohort_vote": "round"}
        assert config_from_dict(archived).run_name() == Config(method=method).run_name()
    blend = Config(method="fedavg", attack="cut_blend")
    assert blend.run_name() != Config(method="fedavg", attack="cut_blend", cohort_cut="tree").run_name()
    with pytest.raises(ValueError, match="quorum"):
        Config(method="fedavg", quorum=0.5).validate()


def test_default_clip_switches_fedlns_defaults_clipping_and_names_only_its_runs():
    from fedlns_sim.methods import make_screener

    assert make_screener(Config(method="fedlns_default")).clip == "median"
    assert make_screener(Config(method="fedlns_default", default_clip="none")).clip is None
    assert Config(method="fedlns_default", default_clip="none").run_name() != Config(method="fedlns_default").run_name()
    archived = {k: v for k, v in Config(method="fedlns_default").to_dict().items() if k != "default_clip"}
    assert config_from_dict(archived).run_name() == Config(method="fedlns_default").run_name()  # added at its default
    with pytest.raises(ValueError, match="default_clip"):
        Config(method="fedlns_default", default_clip="mean").validate()


def test_default_warmup_sets_fedlns_defaults_warmup_and_names_only_its_runs():
    from fedlns_sim.methods import make_screener

    assert make_screener(Config(method="fedlns_default")).warmup == "aggregate"
    for warmup in ("hold", "screen"):
        config = Config(method="fedlns_default", default_warmup=warmup)
        assert make_screener(config).warmup == warmup
        assert config.run_name() != Config(method="fedlns_default").run_name()
    archived = {k: v for k, v in Config(method="fedlns_default").to_dict().items() if k != "default_warmup"}
    assert config_from_dict(archived).run_name() == Config(method="fedlns_default").run_name()  # added at its default
    with pytest.raises(ValueError, match="default_warmup must be"):
        Config(method="fedlns_default", default_warmup="skip").validate()
    with pytest.raises(ValueError, match="fedlns_default only"):  # not in other methods' names: refused there
        Config(method="fedavg", default_warmup="hold").validate()
