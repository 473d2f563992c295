"""A real FedML single-process simulation (backend "sp") with FedLNS, offline on CPU.

Eight clients train a tiny next-token model through FedML's own FedAvgAPI and
ModelTrainerCLS; FedML samples six per round. Clients 2 and 5 train on corrupted targets
(the paper's attack: every target replaced by a uniformly random token). Round 0 fills the
bank with six ids (warm-up: the global model is held); from round 1 on the bank holds
seven ids, screening is active, and the attackers must be rejected whenever FedML samples
them, while the honest task is learned.
"""

import types

import numpy as np
import pytest
import torch
import fedml
from fedml import FedMLRunner
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fedlns_core import FedLNS
from fedlns_fedml import FedLNSServerAggregator, attach_to_sp_fedavg

VOCAB, CONTEXT = 16, 4
N_CLIENTS, PER_ROUND, ROUNDS, SAMPLES = 8, 6, 6, 192
ACTIVATION = 7
ATTACKERS = {2, 5}


class TinyNextTokenModel(nn.Module):
    """Token and position embeddings, LayerNorm, MLP, LayerNorm, vocabulary head (GPT-2 style names)."""

    def __init__(self, width=32, hidden=64):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, width)
        self.wpe = nn.Embedding(CONTEXT, width)
        self.ln_1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(CONTEXT * width, hidden), nn.GELU())
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, VOCAB)

    def forward(self, tokens):                                      # (batch, CONTEXT) -> (batch, VOCAB)
        hidden = self.ln_1(self.wte(tokens) + self.wpe(torch.arange(CONTEXT)))
        return self.head(self.ln_f(self.mlp(hidden.flatten(1))))


def next_token(context):
    """The honest language: each token follows the previous one in a fixed cyclic order."""
    return (context[:, -1] + 1) % VOCAB


def client_data(client, generator):
    contexts = torch.randint(0, VOCAB, (SAMPLES, CONTEXT), generator=generator)
    targets = next_token(contexts)
    if client in ATTACKERS:                                          # the paper's target corruption
        targets = torch.randint(0, VOCAB, (SAMPLES,), generator=generator)
    return TensorDataset(contexts, targets)


def fedml_dataset():
    """FedML's 8-item dataset list: sizes, global loaders, per-client sizes and loaders, classes."""
    generator = torch.Generator().manual_seed(0)
    train = {c: DataLoader(client_data(c, generator), batch_size=32, shuffle=False) for c in range(N_CLIENTS)}
    test = {c: DataLoader(client_data(c, generator), batch_size=64) for c in range(N_CLIENTS)}
    honest_test = test[0]
    return [N_CLIENTS * SAMPLES, N_CLIENTS * SAMPLES, train[0], honest_test,
            {c: SAMPLES for c in range(N_CLIENTS)}, train, test, VOCAB]


def fedml_args():
    """The settings a fedml_config.yaml would give for an sp FedAvg run, registered with FedML.

    ``fedml.init`` is not called: for sp it seeds the RNGs and then ``mlops.init`` fetches a
    config from FedML's servers (five tries, offline). ``fedml.mlops.pre_setup`` is the part of
    it that registers the args; with ``using_mlops=False`` every MLOps call is then a no-op
    (without registered args FedML would call ``fedml.init`` itself, for cross-cloud).
    """
    args = types.SimpleNamespace(
        training_type="simulation", backend="sp", federated_optimizer="FedAvg",
        dataset="tiny_next_token", client_num_in_total=N_CLIENTS, client_num_per_round=PER_ROUND,
        comm_round=ROUNDS, epochs=2, batch_size=32, client_optimizer="adam", learning_rate=0.003,
        weight_decay=0.0, frequency_of_the_test=ROUNDS, enable_wandb=False, using_mlops=False,
        random_seed=0)
    fedml.mlops.pre_setup(args)
    return args


def honest_loss(model, loader):
    with torch.no_grad():
        losses = [nn.functional.cross_entropy(model(x), y, reduction="sum") for x, y in loader]
    return float(sum(losses)) / len(loader.dataset)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                                        # CI shares two cores
    yield
    torch.set_num_threads(threads)


def test_sp_simulation_screens_out_the_attackers_once_the_bank_is_active(one_thread):
    torch.manual_seed(0)
    args, dataset, model = fedml_args(), fedml_dataset(), TinyNextTokenModel()
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    loss_before = honest_loss(model, dataset[3])

    aggregator = FedLNSServerAggregator(
        model, args, screener=FedLNS.paper(activation_threshold=ACTIVATION, random_state=0))
    runner = FedMLRunner(args, torch.device("cpu"), dataset, model)
    api = attach_to_sp_fedavg(runner, aggregator)
    globals_after = []
    aggregate = api._aggregate
    api._aggregate = lambda w_locals: globals_after.append(aggregate(w_locals)) or globals_after[-1]
    runner.run()

    records = aggregator.records
    assert len(records) == ROUNDS
    for round_index, record in enumerate(records):
        # Ids are FedML's sampled silo indices (np.random.seed(round) in FedAvgAPI), not positions.
        np.random.seed(round_index)
        sampled = np.random.choice(range(N_CLIENTS), PER_ROUND, replace=False).tolist()
        assert record.client_ids == tuple(sampled)
        result = record.screening
        if not result.active:
            assert result.retained == () and record.kept_positions == ()
            previous = initial if round_index == 0 else globals_after[round_index - 1]
            for key, value in previous.items():                     # w_{t+1} = w_t while warming up
                assert torch.equal(globals_after[round_index][key], value)
            continue
        attackers_here = ATTACKERS & set(sampled)
        honest_here = set(sampled) - ATTACKERS
        assert not attackers_here & set(result.retained), result.explain()
        assert all(record.rejected[a].startswith("screened:") for a in attackers_here), result.explain()
        assert len(honest_here & set(result.retained)) * 2 > len(honest_here), result.explain()

    assert [record.screening.active for record in records] == [False] + [True] * (ROUNDS - 1)
    attacked = [r for r in records if r.screening.active and ATTACKERS & set(r.client_ids)]
    assert len(attacked) >= 4                                        # the check above had work to do
    assert honest_loss(model, dataset[3]) < 0.5 * loss_before       # the retained updates helped


def test_attach_refuses_other_simulations_and_a_second_aggregator():
    args, dataset, model = fedml_args(), fedml_dataset(), TinyNextTokenModel()
    aggregator = FedLNSServerAggregator(model, args, screener=FedLNS.paper(activation_threshold=ACTIVATION))
    runner = FedMLRunner(args, torch.device("cpu"), dataset, model)
    api = attach_to_sp_fedavg(runner.runner, aggregator)             # the simulator works too
    assert api is runner.runner.fl_trainer
    with pytest.raises(RuntimeError, match="already"):
        attach_to_sp_fedavg(api, aggregator)
    with pytest.raises(TypeError, match="single-process FedAvg"):
        attach_to_sp_fedavg(types.SimpleNamespace(runner=object()), aggregator)
