"""A FlowerTune-style Flower app: LoRA fine-tuning of a tiny LLaMA, screened by FedLNS on the server."""
