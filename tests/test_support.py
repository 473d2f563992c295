"""The support rule: population support of the full update, the loud-normalization test, clipping."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedlns_core import FedLNS
from fedlns_core._support import (
    _CHUNK,
    _sign_bits,
    clip_scales,
    population_groups,
    sketch_updates,
    support_rule,
    update_sketch,
)

P = 1500
GLOBAL = {"h.0.ln_1.weight": np.ones(16), "h.0.mlp.weight": np.zeros(P)}


def federation(noise_seed=0):
    """Honest updates share a drift direction (as language-model updates do across rounds); the drift is the
    same for every call, the clients' noise comes from ``noise_seed``."""
    fixed = np.random.default_rng(0)
    drift, norm_drift = fixed.standard_normal(P), 0.02 * fixed.standard_normal(16)
    rng = np.random.default_rng([noise_seed, 1])

    def honest():
        return {"h.0.ln_1.weight": 1 + norm_drift + 0.01 * rng.standard_normal(16),
                "h.0.mlp.weight": drift + rng.standard_normal(P)}

    def frozen():   # norms sent back unchanged, the rest pushed against the honest direction
        return {"h.0.ln_1.weight": np.ones(16), "h.0.mlp.weight": -0.1 * drift + rng.standard_normal(P)}

    return rng, honest, frozen


def run(screener, rounds, attackers, seed=0, per_round=10, population=50):
    rng, honest, frozen = federation(seed)
    results = []
    for _ in range(rounds):
        ids = [int(i) for i in rng.choice(population, per_round, replace=False)]
        clients = {i: frozen() if i in attackers else honest() for i in ids}
        results.append((screener.screen(GLOBAL, clients, {i: 100 for i in clients}), clients))
    return results


def support_screener(**overrides):
    return FedLNS(**{"activation_threshold": 30, "random_state": 0, "retain_rule": "support", **overrides})


def test_sketch_estimates_cosines():
    rng = np.random.default_rng(1)
    g = {"a": np.zeros(40_000), "b": np.zeros((100, 30))}
    u = {k: rng.standard_normal(v.shape) for k, v in g.items()}
    v = {k: 0.6 * u[k] + 0.8 * rng.standard_normal(g[k].shape) for k in g}
    (su, nu), (sv, _) = (update_sketch(g, x, sorted(g), 2048, 7) for x in (u, v))
    exact = sum(float((u[k] * v[k]).sum()) for k in g) / np.sqrt(sum(float((u[k] ** 2).sum()) for k in g)
                                                                  * sum(float((v[k] ** 2).sum()) for k in g))
    assert abs(su @ sv / np.linalg.norm(su) / np.linalg.norm(sv) - exact) < 0.06
    assert nu == pytest.approx(np.sqrt(sum(float((u[k] ** 2).sum()) for k in g)))


def test_sketch_depends_on_the_seed_only_through_the_signs():
    g = {"a": np.zeros(10)}
    u = {"a": np.arange(10.0)}
    one, other = update_sketch(g, u, ["a"], 4, 1)[0], update_sketch(g, u, ["a"], 4, 2)[0]
    assert not np.allclose(one, other)
    assert np.allclose(np.sort(np.abs(update_sketch(g, {"a": np.ones(10)}, ["a"], 10, 3)[0])), 1.0)


def test_batched_sketches_are_each_clients_own_across_chunks_and_threads():
    """Large enough to cross a sign chunk inside a key and to run on two threads: every row is the sketch
    of that client alone and the explicit ``sum_b (r * u)[b k:(b+1) k]`` of the module's definition."""
    rng = np.random.default_rng(3)
    g = {"a": rng.standard_normal(_CHUNK - 5).astype(np.float32), "b": rng.standard_normal(300).astype(np.float32),
         "c": np.zeros(40, np.float64)}
    clients = [{k: (v + rng.standard_normal(v.shape)).astype(v.dtype) for k, v in g.items()} for _ in range(3)]
    sketches, norms = sketch_updates(g, clients, sorted(g), 64, 9)
    signs = np.concatenate([2.0 * _sign_bits(9, chunk) - 1.0 for chunk in (0, 1)])
    for row, client in enumerate(clients):
        one, norm = update_sketch(g, client, sorted(g), 64, 9)
        assert np.array_equal(sketches[row], one) and norms[row] == norm
        update = np.concatenate([np.subtract(client[k], g[k], dtype=g[k].dtype).astype(np.float64).ravel()
                                 for k in sorted(g)])
        signed = np.pad(update * signs[:update.size], (0, -update.size % 64))
        assert np.allclose(one, signed.reshape(-1, 64).sum(axis=0), rtol=1e-5, atol=1e-3)   # float32 fold
        # the squares are summed in the parameters' float32 by BLAS, whose order (and so the last digits) depends on
        # the processor: 1.06e-6 off on an AMD EPYC, within 1e-6 on an Intel Xeon
        assert norm == pytest.approx(np.linalg.norm(update), rel=1e-5)


def test_population_groups_need_a_majority_and_a_real_separation():
    rng = np.random.default_rng(0)
    honest = rng.standard_normal(64)
    unit = lambda rows: rows / np.linalg.norm(rows, axis=1, keepdims=True)  # noqa: E731
    clean = unit(honest + 1.5 * rng.standard_normal((30, 64)))
    groups = population_groups(clean @ clean.T, max_groups=4, separation=0.5)
    assert groups is None or not groups.separated                            # nobody to reject in clean rounds
    attack = rng.standard_normal(64)
    mixed = unit(np.vstack([honest + 1.5 * rng.standard_normal((18, 64)), attack + rng.standard_normal((12, 64))]))
    groups = population_groups(mixed @ mixed.T, max_groups=4, separation=0.5)
    assert groups.majority[:18].sum() >= 16 and not groups.majority[18:].any()    # an honest outlier may split off
    assert np.any(groups.separated, axis=0)[18:].all()
    halves = unit(np.vstack([honest + 0.5 * rng.standard_normal((15, 64)), attack + 0.5 * rng.standard_normal((15, 64))]))
    assert population_groups(halves @ halves.T, max_groups=4, separation=0.5) is None   # no majority: no verdict


@pytest.mark.parametrize("population, per_round", [(20, 4), (50, 10), (100, 20)])
def test_frozen_attackers_are_rejected_where_the_paper_rule_keeps_them(population, per_round):
    attackers = set(range(int(0.4 * population)))
    rounds = 3 * population // per_round
    supported = run(FedLNS.for_federation(population, per_round, random_state=0), rounds, attackers,
                    per_round=per_round, population=population)
    paper = run(FedLNS.paper(activation_threshold=FedLNS.for_federation(population, per_round).activation_threshold,
                             random_state=0), rounds, attackers, per_round=per_round, population=population)
    tally = {"support": [0, 0, 0, 0], "paper": [0, 0, 0, 0]}      # attackers kept, rejected; honest kept, rejected
    for name, results in (("support", supported), ("paper", paper)):
        for result, clients in results:
            if not result.active:
                continue
            for client in clients:
                kept = client in result.retained
                tally[name][(0 if client in attackers else 2) + (0 if kept else 1)] += 1
    assert sum(tally["support"][:2]) >= 10, tally
    assert tally["support"][1] >= 0.95 * sum(tally["support"][:2]), tally           # TPR
    assert tally["support"][3] <= 0.05 * sum(tally["support"][2:]), tally           # FPR
    assert tally["paper"][0] > tally["paper"][1], tally                              # the paper keeps the frozen ones


def test_clean_rounds_keep_everyone_and_clipping_bounds_each_update():
    results = run(support_screener(), 8, set())
    active = [(r, c) for r, c in results if r.active]
    assert active
    for result, clients in active:
        assert set(result.retained) == set(clients)
        assert all(0 < scale <= 1 for scale in result.clip_scales.values())
        norms = {c: np.sqrt(sum(float(np.square(clients[c][k] - GLOBAL[k]).sum()) for k in GLOBAL))
                 for c in result.retained}
        limit = np.median(list(norms.values()))
        assert max(norms[c] * result.clip_scales[c] for c in result.retained) <= limit * (1 + 1e-9)


def test_loud_normalization_change_is_rejected_with_its_reason():
    screener = support_screener()
    run(screener, 5, set())
    rng, honest, _ = federation(5)
    clients = {i: honest() for i in range(10)}
    clients[3]["h.0.ln_1.weight"] = clients[3]["h.0.ln_1.weight"] + 5.0
    result = screener.screen(GLOBAL, clients, {i: 100 for i in clients})
    assert result.active
    assert "loud normalization change" in result.rejected[3]
    assert set(result.retained) == set(range(10)) - {3}


@pytest.mark.parametrize("change", ["normalization change", "LoRA change"])
def test_the_outcome_marks_the_loud_clients_whatever_the_wording(change):
    rng = np.random.default_rng(0)
    a, b = np.eye(8)[:2]  # six updates one way, two another: the two are a separated group
    sketches = np.vstack([np.tile(a, (6, 1)), np.tile(b, (2, 1))]) + 0.05 * rng.standard_normal((8, 8))
    bank_scores = np.array([1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.0, 1.1])
    scores = np.array([1.0, 1.1, 9.0, 0.9, 1.0, 1.05, 1.0, 9.0])  # 2 and 7 loud; 7 is rejected as separated first
    outcome = support_rule(
        scores, sketches, sketches, np.arange(8), np.ones(8), bank_scores,
        recent=8, max_groups=2, separation=2.0, loud_separation=3.0, change=change,
    )
    assert outcome.retained.tolist() == [True, True, False, True, True, True, False, False]
    assert outcome.loud.tolist() == [False, False, True, False, False, False, False, False]
    assert outcome.reasons[2].startswith(f"loud {change}") and outcome.reasons[7].startswith("in a group separated")


def test_clip_scales():
    assert clip_scales({"a": 1.0, "b": 2.0, "c": 4.0}, ["a", "b", "c"]) == {"a": 1.0, "b": 1.0, "c": 0.5}
    assert clip_scales({"a": 0.0, "b": 2.0}, ["a", "b"])["a"] == 1.0


def test_save_and_load_resume_with_the_same_decisions(tmp_path):
    first, second = support_screener(random_state=None), None
    run(first, 4, {1, 2})
    first.save(tmp_path / "state.npz")
    second = FedLNS.load(tmp_path / "state.npz")
    assert second._sketch_seed == first._sketch_seed is not None
    rng, honest, frozen = federation(9)
    clients = {i: frozen() if i in (1, 2) else honest() for i in range(10)}
    one = first.screen(GLOBAL, clients, {i: 100 for i in clients})
    two = second.screen(GLOBAL, clients, {i: 100 for i in clients})
    assert one.to_dict() == two.to_dict()


@settings(max_examples=25, deadline=None)
@given(order=st.permutations(list(range(10))))
def test_decisions_do_not_depend_on_client_order(order):
    screener = support_screener()
    run(screener, 5, {0, 1, 2, 3})
    rng, honest, frozen = federation(3)
    clients = {i: frozen() if i < 3 else honest() for i in range(10)}
    base = _copy(screener).screen(GLOBAL, clients, {i: 100 for i in clients})
    permuted = _copy(screener).screen(GLOBAL, {i: clients[i] for i in order}, {i: 100 for i in order})
    assert sorted(base.retained) == sorted(permuted.retained)
    assert base.rejected == {i: permuted.rejected[i] for i in base.rejected}


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(-1e3, 1e3, allow_nan=False), norm_shift=st.floats(-10, 10, allow_nan=False),
       seed=st.integers(0, 2**16))
def test_one_hostile_client_never_changes_the_others_decisions(scale, norm_shift, seed):
    screener = support_screener()
    run(screener, 6, set(range(12)))
    rng, honest, frozen = federation(11)
    clients = {i: frozen() if i < 3 else honest() for i in range(10)}
    counts = {i: 100 for i in clients}
    without = _copy(screener).screen(GLOBAL, clients, counts)
    hostile_rng = np.random.default_rng(seed)
    clients[99] = {"h.0.ln_1.weight": np.ones(16) + norm_shift,
                   "h.0.mlp.weight": scale * hostile_rng.standard_normal(P)}
    with_hostile = _copy(screener).screen(GLOBAL, clients, {**counts, 99: 100})
    assert [c for c in with_hostile.retained if c != 99] == list(without.retained)
    assert {c: r.split(" (")[0] for c, r in with_hostile.rejected.items() if c != 99} == \
        {c: r.split(" (")[0] for c, r in without.rejected.items()}


def _copy(screener):
    import copy
    return copy.deepcopy(screener)


def test_update_sketches_are_the_banked_ones():
    from fedlns_core._support import SKETCH_KEY

    screener = support_screener()
    (result, clients), = run(screener, 1, set())
    sketches = screener.update_sketches(GLOBAL, clients)
    assert set(sketches) == set(clients)
    for client_id, sketch in sketches.items():
        assert np.array_equal(screener.bank[client_id][SKETCH_KEY], sketch)
