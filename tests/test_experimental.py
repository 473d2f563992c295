"""fedlns_core.experimental: the deprecated LoRA view, kept equal to the screener's LoRA signature."""

import numpy as np
import pytest

from fedlns_core import FedLNS
from fedlns_core.experimental import lora_selector, lora_signature


def test_the_deprecated_view_warns_and_equals_the_screeners_lora_signature():
    rng = np.random.default_rng(0)
    g = {"m.lora_A.weight": rng.normal(size=(2, 5)), "m.lora_B.weight": rng.normal(size=(3, 2))}
    sent = {c: {k: v + rng.normal(size=v.shape) for k, v in g.items()} for c in range(3)}
    with pytest.warns(FutureWarning, match="signature='lora'"):
        _, views = lora_signature(g, sent)
    with pytest.warns(FutureWarning):
        assert lora_selector().select(views[0]) == ("m.lora_signature.A", "m.lora_signature.B")
    keys, rows = FedLNS(signature="lora").client_signatures(g, sent)
    assert keys == ("m.lora_A.weight column norms", "m.lora_B.weight row norms")
    for c in sent:
        np.testing.assert_array_equal(rows[c], np.concatenate([views[c]["m.lora_signature.A"],
                                                               views[c]["m.lora_signature.B"]]))


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("global_params, clients, message", [
    ({"ln.weight": np.ones(2)}, {1: {"ln.weight": np.ones(2)}}, "needs LoRA entries"),
    ({"m.lora_A.weight": np.ones((1, 2)), "m.lora_B.weight": np.ones((2, 1))},
     {1: {"m.lora_A.weight": np.ones((1, 2))}}, "did not send 'm.lora_B.weight'"),
    ({"m.lora_A.weight": np.ones((1, 2)), "m.lora_B.weight": np.ones((2, 1))},
     {1: {"m.lora_A.weight": np.ones((2, 2)), "m.lora_B.weight": np.ones((2, 1))}}, "has shape"),
])
def test_bad_payloads_are_refused_with_the_reason(global_params, clients, message):
    with pytest.raises(ValueError, match=message):
        lora_signature(global_params, clients)
