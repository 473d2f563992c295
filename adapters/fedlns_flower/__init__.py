"""Flower adapter for FedLNS: a wrapper around any Message-API strategy (flwr >= 1.41).

``FedLNSStrategy(strategy=FedAvg(...), screener=FedLNS(...))`` screens each round's
training replies by their normalization-layer signatures and lets the wrapped strategy
aggregate only the retained ones.
"""

from fedlns_flower._records import arrayrecord_to_numpy, numpy_to_arrayrecord
from fedlns_flower._strategy import FedLNSStrategy

__all__ = [
    "FedLNSStrategy",
    "arrayrecord_to_numpy",
    "numpy_to_arrayrecord",
]
