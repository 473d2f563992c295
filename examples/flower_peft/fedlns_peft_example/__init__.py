"""A FlowerTune-style Flower app: LoRA+norm fine-tuning of a tiny LLaMA, screened by FedLNS on the server."""
