"""A Flower app that trains a tiny GPT-2 with target-corrupting clients and FedLNS on the server."""
