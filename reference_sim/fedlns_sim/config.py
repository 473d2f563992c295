"""Run configuration: one dataclass of plain defaults, presets as override dicts.

The defaults are the paper's GPT-2/WikiText run (appendix ``app:experimental_details``). A preset is a dict of
overrides per model family; ``make_config`` applies a preset and then user overrides, and rejects unknown keys
and values of the wrong type, so a typo never silently runs the default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

# The one registry of names: the command line, the sweep, the report and the tests read these.
FAMILIES = ("gpt", "bert", "llama")
FAMILY_NAMES = {"gpt": "GPT / WikiText", "bert": "BERT / Shakespeare", "llama": "LLaMA / StackOverflow"}
# Text corpora (data.load_texts) and the one each family trains on unless told otherwise.
CORPORA = ("wikitext", "shakespeare", "stackoverflow")
FAMILY_CORPUS = {"gpt": "wikitext", "bert": "shakespeare", "llama": "stackoverflow"}
CORPUS_NAMES = {"wikitext": "WikiText", "shakespeare": "Shakespeare", "stackoverflow": "StackOverflow"}
PEFT_METHODS = ("", "lora")
PARTITIONS = ("iid", "noniid")
PARTITION_NAMES = {"iid": "IID", "noniid": "Non-IID"}
# Every method, in table order, with its display name.
METHOD_NAMES = {
    "fedavg": "FedAvg",
    "norm_bounded_fedavg": "Norm-Bound",
    "coordinate_median": "Median",
    "trimmed_mean": "Trimmed",
    "multi_krum": "Multi-Krum",
    "flame": "FLAME",
    "fedlns": "FedLNS",
    "fedlns_default": "FedLNS (default)",
    "fedlns_support": "FedLNS (support rule)",
    "fedlns_two": "FedLNS (2-GMM)",
    "fedlns_multi_krum": "FedLNS + Multi-Krum",
    "fedlns_median": "FedLNS + Median",
    "fedlns_norm_bound": "FedLNS + Norm-Bound",
    "oracle": "Oracle (benign only)",
}
METHODS = tuple(METHOD_NAMES)
BASELINES = ("fedavg", "norm_bounded_fedavg", "coordinate_median", "trimmed_mean", "multi_krum", "flame")
COMPARED = (*BASELINES, "fedlns")  # the paper's comparison (fig:attack40_ppl)
# Defence in depth: FedLNS screens, then a full-update rule aggregates what it retained.
COMPOSED = {
    "fedlns_multi_krum": "multi_krum",
    "fedlns_median": "coordinate_median",
    "fedlns_norm_bound": "norm_bounded_fedavg",
}
# Attacks (attacks.py implements one class per name; docs there).
ATTACK_NAMES = (
    "target_corruption",
    "backdoor",
    "sign_flip",
    "scaling",
    "gaussian",
    "alie",
    "ipm",
    "minmax",
    "norm_mimicry",
    "norm_freeze",
    "decoy",
    "delta_budget",
    "norm_scale_search",
    "norm_noise",
    "band_mimic",
    "ipm_search",
    "lora_quiet",
    "lora_band",
    "majority_only",
    "sleeper",
    "cut_blend",
    "half_blend",
    "margin_blend",
    "side_join",
    "weak_core",
    "agree_blend",
    "edgeless",
    "majority_weak",
    "weak_sleeper",
    "majority_drift",
    "contest_flip",
    "minority_flip",
    "victim_flip",
)
# Attacks on the LoRA factors of an adapter payload (peft="lora").
LORA_ATTACKS = ("lora_quiet", "lora_band")
# References, not defences: the oracle reads the ground truth (which clients are malicious).
REFERENCES = ("oracle",)
PAPER_FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4)
PAPER_SEEDS = (100, 200, 300)
# Config fields that may differ between a run and its resume (machine choices, not the experiment).
MACHINE_KEYS = ("device", "threads", "data", "record_signatures")
# fedlns_core's mixture solvers, cohort cuts, votes and weights (its settings table; a test keeps them equal): not
# imported here, because reading run files must not need the core's numerical stack.
MIXTURE_SOLVERS = ("fast", "sklearn")
COHORT_CUTS = ("tree", "significant", "confirmed", "centered")
COHORT_VOTES = ("round", "history", "strong", "placed", "settled")
COHORT_WEIGHTS = ("unit", "coherence", "agreeing")
COHORT_UNDECIDED = ("support", "keep", "hold", "deviation", "hold_contested", "adaptive")
COHORT_CONTESTED = ("hold", "reject")
COHORT_STRONG_MINORITY = ("support", "reject")
COHORT_OPEN = ("support", "keep")
#: The cohort rule's settings that take one of a few values, and those values (``Config.validate`` checks them).
COHORT_OPTIONS = {
    "cohort_undecided": COHORT_UNDECIDED,
    "cohort_cut": COHORT_CUTS,
    "cohort_vote": COHORT_VOTES,
    "cohort_weight": COHORT_WEIGHTS,
    "cohort_contested": COHORT_CONTESTED,
    "cohort_strong_minority": COHORT_STRONG_MINORITY,
    "cohort_open": COHORT_OPEN,
}
#: ``fedlns_default``'s settings that are a share in [0, 1] (``Config.validate`` checks them).
SHARES = ("quorum", "cohort_margin", "cohort_balance")


#: The server's settings that an attack written against them reads, whatever the method: they name its runs.
ATTACK_READS: dict[str, tuple[str, ...]] = {
    "cut_blend": ("cohort_cut",),
    "half_blend": ("cohort_cut",),
    "margin_blend": ("cohort_margin",),
}
#: The attacks written against the cohort rule's cut.
CUT_ATTACKS = tuple(attack for attack, read in ATTACK_READS.items() if "cohort_cut" in read)

#: Settings of method ``fedlns_default`` that a run of another method may not change.
DEFAULT_METHOD_ONLY = (
    "default_clip",
    "default_warmup",
    "cohort_margin",
    "cohort_balance",
    "cohort_contested",
    "cohort_strong_minority",
    "cohort_open",
    "quorum",
)
#: Settings of method ``fedlns_default`` alone: other methods' run names leave them out. Besides those above, the ones
#: other methods' runs carry at their archived values (LEGACY).
DEFAULT_METHOD_KEYS = ("default_rule", "cohort_undecided", "cohort_vote", "cohort_weight", *DEFAULT_METHOD_ONLY)

#: Settings whose default changed when they were added: the value every run made before then had. Archived runs
#: load with it, and run names hash a setting only where it differs from it, so their names stay theirs.
LEGACY = {
    "default_rule": "support",
    "cohort_undecided": "keep",
    "cohort_cut": "tree",
    "cohort_weight": "unit",
    "cohort_vote": "round",
}


def experiment_fields(config_dict: dict) -> dict:
    """The config without the machine keys (and ``default_rule`` outside ``fedlns_default``, the one method it
    applies to; ``cohort_cut`` outside it and the attacks written against the cut, ``cohort_margin`` outside it and
    the attacks written against the margin): what must match for two folders to hold the same run."""
    unused: tuple[str, ...] = ()
    if config_dict.get("method") != "fedlns_default":
        read = ATTACK_READS.get(str(config_dict.get("attack")), ())
        unused = tuple(key for key in (*DEFAULT_METHOD_KEYS, "cohort_cut") if key not in read)
    return {k: v for k, v in config_dict.items() if k not in MACHINE_KEYS and k not in unused}


@dataclass(frozen=True)
class Config:
    """Everything one simulated run depends on (the paper's GPT/WikiText defaults)."""

    # experiment
    family: str = "gpt"  # gpt | bert | llama
    method: str = "fedlns"  # see METHODS
    partition: str = "iid"  # iid | noniid
    malicious_fraction: float = 0.4  # over the whole population
    seed: int = 100
    # federation (tab:app_fl_protocol)
    num_clients: int = 200
    participation: float = 0.1  # clients per round = round(participation * num_clients)
    rounds: int = 200
    activation_coverage: float = 0.5  # M_act / K; the paper's default M_act = 100 of 200
    # attack (tab:app_attack_config)
    attack: str = "target_corruption"  # see attacks.ATTACKS
    p_corr: float = 1.0
    attack_scale: float = 0.0  # sign_flip, scaling, alie (z), ipm (epsilon), decoy, lora_quiet; 0 = default
    attack_noise: float = 0.01  # gaussian: standard deviation of the sent update's coordinates
    attack_fraction: float = 0.5  # backdoor: share of an attacker's blocks that carry the trigger
    backdoor_trigger: str = "cf mn bb"
    backdoor_target: str = "attack at dawn"
    # data and tokenization (tab:app_dataset_tokenization, tab:app_optimization_eval)
    data: str = ""  # data folder; "" -> $FEDLNS_DATA, ../shared/data, else synthetic
    tokenizer: str = "pretrained"  # pretrained | bpe (trained on the training split)
    vocab_size: int = 0  # size of the trained BPE vocabulary (tokenizer="bpe")
    block_size: int = 128
    max_train_examples: int = 0  # documents (LLaMA: 50,000 posts); 0 = full split
    max_eval_examples: int = 0  # documents (LLaMA: 5,000); 0 = full split
    max_train_blocks: int = 0  # cap on training blocks before partitioning; 0 = all
    eval_batches: int = 200
    eval_batch_size: int = 8
    eval_masks: int = 1  # MLM only: independent masking draws of the evaluation blocks
    mlm_probability: float = 0.15
    # model (tab:app_model_architectures); 0 means "the family's default"
    n_layer: int = 12
    n_embd: int = 256
    n_head: int = 16
    n_kv_head: int = 0
    intermediate_size: int = 0
    max_position_embeddings: int = 128
    dropout: float = 0.1  # GPT only; BERT and LLaMA keep their config defaults
    # client optimisation (tab:app_optimization_eval)
    local_epochs: int = 3
    batch_size: int = 8
    learning_rate: float = 3e-4
    weight_decay: float = 0.01
    # method parameters; negative means "from the malicious fraction" (tab:app_robust_agg_params)
    norm_bound: float = 0.0  # 0 -> the aggregator's own default
    trim_fraction: float = -1.0
    krum_f: int = -1
    krum_m: int = -1
    flame_noise: float = 0.001
    mixture_solver: str = "sklearn"  # FedLNS's mixtures: sklearn (the reference, as every archived run) | fast
    retain_rule: str = "paper"  # FedLNS: paper | for_federation (the paper-family rule rule_for_round_size gives for
    # clients_per_round, docs/rules.md; the activation threshold stays this config's)
    warmup: str = "hold"  # FedLNS before activation: hold (the paper's eq. skip_update: the global model
    # stays) | aggregate (FedAvg over every valid client until screening starts)
    # system
    device: str = "auto"  # auto | cpu | cuda
    threads: int = 0  # torch threads; 0 = leave torch's default
    batch_clients: str = "off"  # off: one client at a time | on: a round's clients as one batched model
    # (no dropout, no PEFT; equal up to float rounding) | auto: on where possible
    record_signatures: bool = False  # FedLNS: save every client's signature per round (offline replay)
    # fine-tuning scenario (finetune.py): a base model pretrained centrally on one corpus, then federated PEFT
    # fine-tuning on another; clients send the PEFT payload (get_peft_model_state_dict), not the whole model
    corpus: str = ""  # the federated clients' corpus; "" = the family's (FAMILY_CORPUS)
    pretrain_corpus: str = ""  # "" = no base model: train from scratch (the paper)
    pretrain_steps: int = 0  # central AdamW steps on pretrain_corpus (cached per base model)
    pretrain_batch_size: int = 16
    pretrain_learning_rate: float = 2e-3
    peft: str = ""  # "" = clients send every weight (the paper) | "lora"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_targets: str = ""  # comma-separated module names; "" = the family's attention projections
    peft_norms: bool = True  # norms trainable and in the payload (fedlns_torch.make_norms_trainable)
    signature: str = "norms"  # FedLNS's signature: norms | lora_stats | auto (methods.SIGNATURES)
    default_rule: str = "cohort"  # what fedlns_default ran: cohort (FedLNS.for_federation's choice today) |
    # support (every run archived before the cohort rule: LEGACY; the report
    # shows them as fedlns_support, the method that runs that rule now)
    cohort_undecided: str = "adaptive"  # fedlns_default's FedLNS(cohort_undecided=...): adaptive (its default) |
    # support (its default before) | keep (runs archived before the setting: LEGACY) | hold | deviation | hold_contested
    cohort_cut: str = "confirmed"  # fedlns_default's FedLNS(cohort_cut=...): confirmed (its default) | tree (every run
    # archived before it: LEGACY) | significant | centered (a candidate); also what cut_blend and half_blend attack,
    # so it names every method's runs
    default_clip: str = "median"  # fedlns_default's FedLNS(clip=...): median (its default) | none
    default_warmup: str = "aggregate"  # fedlns_default's FedLNS(warmup=...): aggregate (its default) | hold | screen
    cohort_vote: str = "settled"  # fedlns_default's FedLNS(cohort_vote=...): settled (its default) | round (its
    # default before: runs archived before it, LEGACY) | history | strong | placed
    cohort_weight: str = "agreeing"  # fedlns_default's FedLNS(cohort_weight=...): agreeing (its default) | unit (its
    # default before: runs archived before it, LEGACY) | coherence
    cohort_margin: float = 0.0  # fedlns_default's FedLNS(cohort_margin=...): 0 (its default) | a share in (0, 1]
    cohort_balance: float = 0.0  # fedlns_default's FedLNS(cohort_balance=...): 0 (its default) | a share in (0, 1]
    cohort_contested: str = "hold"  # fedlns_default's FedLNS(cohort_contested=...): hold (its default) | reject
    cohort_strong_minority: str = "support"  # fedlns_default's FedLNS(cohort_strong_minority=...): support (its
    # default) | reject
    cohort_open: str = "support"  # fedlns_default's FedLNS(cohort_open=...): support (its default) | keep
    quorum: float = 0.0  # fedlns_default's FedLNS(quorum=...): 0 (its default, off) | a share in (0, 1]

    @property
    def clients_per_round(self) -> int:
        return max(1, int(round(self.participation * self.num_clients)))

    @property
    def activation_threshold(self) -> int:
        return int(round(self.activation_coverage * self.num_clients))

    @property
    def num_malicious(self) -> int:
        return int(round(self.malicious_fraction * self.num_clients))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def run_name(self) -> str:
        """Directory name of this run: the swept axes (and the attack, unless it is the paper's), then a short hash
        of the experiment's settings that differ from the defaults, so that a setting added later with a default
        leaves existing names alone.

        Examples
        --------
        >>> Config(malicious_fraction=0.3).run_name()[:35], Config(malicious_fraction=0.304).run_name()[:37]
        ('gpt-iid-mal30-fedlns-act50-seed100-', 'gpt-iid-mal30.4-fedlns-act50-seed100-')
        >>> Config(learning_rate=1e-3).run_name() != Config().run_name()
        True
        >>> Config(attack="alie").run_name()[:40]
        'gpt-iid-mal40-fedlns-act50-seed100-alie-'
        """
        defaults = {**Config().to_dict(), **LEGACY}
        changed = {k: v for k, v in experiment_fields(self.to_dict()).items() if v != defaults[k]}
        digest = hashlib.sha1(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:8]
        attack = "" if self.attack == "target_corruption" else f"-{self.attack}"
        return (
            f"{self.family}-{self.partition}-mal{_percent(self.malicious_fraction)}-{self.method}"
            f"-act{_percent(self.activation_coverage)}-seed{self.seed}{attack}-{digest}"
        )

    def validate(self) -> Config:
        checks = [
            (self.family in FAMILIES, f"family must be one of {FAMILIES}, got {self.family!r}"),
            (self.partition in PARTITIONS, f"partition must be one of {PARTITIONS}, got {self.partition!r}"),
            (self.method in METHODS, f"method must be one of {METHODS}, got {self.method!r}"),
            (
                0.0 <= self.malicious_fraction < 1.0,
                f"malicious_fraction must be in [0, 1), got {self.malicious_fraction}",
            ),
            (0.0 < self.participation <= 1.0, f"participation must be in (0, 1], got {self.participation}"),
            (
                0.0 <= self.activation_coverage <= 1.0,
                f"activation_coverage must be in [0, 1], got {self.activation_coverage}",
            ),
            (0.0 <= self.p_corr <= 1.0, f"p_corr must be in [0, 1], got {self.p_corr}"),
            (self.attack in ATTACK_NAMES, f"attack must be one of {ATTACK_NAMES}, got {self.attack!r}"),
            (self.attack not in LORA_ATTACKS or self.peft == "lora", f"attack {self.attack!r} needs peft='lora'"),
            (0.0 <= self.attack_fraction <= 1.0, f"attack_fraction must be in [0, 1], got {self.attack_fraction}"),
            (self.attack_scale >= 0 and self.attack_noise >= 0, "attack_scale and attack_noise must be >= 0"),
            (
                self.tokenizer in ("pretrained", "bpe"),
                f"tokenizer must be 'pretrained' or 'bpe', got {self.tokenizer!r}",
            ),
            (self.tokenizer != "bpe" or self.vocab_size >= 64, "tokenizer='bpe' needs vocab_size >= 64"),
            (self.block_size >= 4, f"block_size must be >= 4, got {self.block_size}"),
            (self.eval_masks >= 1, f"eval_masks must be >= 1, got {self.eval_masks}"),
            (self.num_clients >= 2 and self.rounds >= 1, "need num_clients >= 2 and rounds >= 1"),
            (self.n_embd % self.n_head == 0, f"n_embd {self.n_embd} is not divisible by n_head {self.n_head}"),
            (self.device in ("auto", "cpu", "cuda"), f"device must be auto, cpu or cuda, got {self.device!r}"),
            (self.corpus in ("", *CORPORA), f"corpus must be one of {CORPORA} (or empty), got {self.corpus!r}"),
            (
                self.pretrain_corpus in ("", *CORPORA),
                f"pretrain_corpus must be one of {CORPORA} (or empty), got {self.pretrain_corpus!r}",
            ),
            (not self.pretrain_corpus or self.pretrain_steps >= 1, "pretrain_corpus needs pretrain_steps >= 1"),
            (self.peft in PEFT_METHODS, f"peft must be one of {PEFT_METHODS}, got {self.peft!r}"),
            (not self.peft or self.lora_r >= 1, f"lora_r must be >= 1, got {self.lora_r}"),
            (
                self.batch_clients in ("off", "on", "auto"),
                f"batch_clients must be off, on or auto, got {self.batch_clients!r}",
            ),
            (
                self.retain_rule in ("paper", "for_federation"),
                f"retain_rule must be paper or for_federation, got {self.retain_rule!r}",
            ),
            (self.warmup in ("hold", "aggregate"), f"warmup must be hold or aggregate, got {self.warmup!r}"),
            (
                self.mixture_solver in MIXTURE_SOLVERS,
                f"mixture_solver must be one of {MIXTURE_SOLVERS}, got {self.mixture_solver!r}",
            ),
            (
                self.signature in ("norms", "lora_stats", "auto"),
                f"signature must be norms, lora_stats or auto, got {self.signature!r}",
            ),
            (self.signature != "lora_stats" or self.peft == "lora", "signature='lora_stats' needs peft='lora'"),
            (
                self.default_rule in ("cohort", "support"),
                f"default_rule must be cohort or support, got {self.default_rule!r}",
            ),
            *(
                (getattr(self, key) in options, f"{key} must be one of {options}, got {getattr(self, key)!r}")
                for key, options in COHORT_OPTIONS.items()
            ),
            *(
                (0.0 <= getattr(self, key) <= 1.0, f"{key} must be in [0, 1], got {getattr(self, key)}")
                for key in SHARES
            ),
            (
                self.default_clip in ("median", "none"),
                f"default_clip must be median or none, got {self.default_clip!r}",
            ),
            (
                self.default_warmup in ("aggregate", "hold", "screen"),
                f"default_warmup must be aggregate, hold or screen, got {self.default_warmup!r}",
            ),
            (
                self.method == "fedlns_default"
                or all(
                    getattr(self, key) == getattr(Config, key)
                    for key in DEFAULT_METHOD_ONLY
                    if key not in ATTACK_READS.get(self.attack, ())
                ),
                f"{' and '.join(DEFAULT_METHOD_ONLY)} apply to method fedlns_default only (cohort_margin also to the "
                f"attacks written against it, {', '.join(a for a, r in ATTACK_READS.items() if 'cohort_margin' in r)})",
            ),
            (
                not self.method.startswith("fedlns") or self.signature != "norms" or not self.peft or self.peft_norms,
                "with peft_norms=false the payload carries no normalization parameter for FedLNS to screen: set "
                "peft_norms=true (the recipe in docs/peft.md) or signature=lora_stats or auto",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        return self


def _percent(fraction: float) -> str:
    """0.4 -> '40', 0.05 -> '05', 0.304 -> '30.4' (exact: two fractions never share a name)."""
    value = round(fraction * 100, 10)
    return f"{value:02.0f}" if value == int(value) else f"{value:g}"


# The paper's per-family settings (tab:app_model_architectures, tab:app_optimization_eval). Clients train as one
# batched model where that gives the sequential numbers (no dropout: LLaMA); the smaller presets keep one client at
# a time, with which every archived run was made.
PAPER = {
    "gpt": dict(batch_clients="auto"),
    "bert": dict(
        batch_clients="auto",
        n_layer=12,
        n_embd=256,
        n_head=16,
        intermediate_size=1024,
        max_position_embeddings=130,
        local_epochs=3,
        learning_rate=3e-4,
    ),
    "llama": dict(
        batch_clients="auto",
        n_layer=8,
        n_embd=256,
        n_head=16,
        n_kv_head=8,
        intermediate_size=1536,
        max_position_embeddings=256,
        local_epochs=2,
        learning_rate=1e-5,
        eval_batches=50,
        max_train_examples=50_000,
        max_eval_examples=5_000,
    ),
}

# CPU scale, chosen from FedAvg runs alone (docs/simulator.md, "How the cpu preset was chosen"): per family, clean
# FedAvg should beat the evaluation set's unigram model by 25% and the 40% attack should cost FedAvg 15%, with at
# least 8 AdamW steps per client and round and at least 25k scored evaluation tokens, within 90 minutes for one
# seed of the 40% comparison on 2 cores. Kept from the paper: 10% participation, activation at 50% coverage,
# AdamW(wd=0.01), the attack, the methods. Scaled: K=100 (10 clients per round, so Multi-Krum's n-f-2 stays
# positive), 40 rounds, 2-layer width-64 models, a 1,024-token BPE vocabulary trained on the training split (a 50k
# embedding would dominate the cost), blocks of 64 tokens. GPT and LLaMA: 32 blocks per client, one epoch at batch
# 4 (8 steps). BERT learns far less per step (only the 15% masked positions are targets): all 5,292 training
# blocks (~53 per client), three epochs at batch 8 (21 steps), a larger learning rate, and its evaluation scores
# five fixed mask draws of the 644 evaluation blocks (one draw scores only ~6k positions).
_CPU_COMMON = dict(
    num_clients=100,
    rounds=40,
    tokenizer="bpe",
    vocab_size=1024,
    block_size=64,
    max_train_blocks=3200,
    eval_batches=13,
    eval_batch_size=32,
    n_layer=2,
    n_embd=64,
    n_head=4,
    max_position_embeddings=64,
    dropout=0.0,
    local_epochs=1,
    batch_size=4,
    learning_rate=2e-3,
    max_train_examples=0,
    max_eval_examples=0,
    threads=1,
)
CPU = {
    "gpt": dict(_CPU_COMMON),
    "bert": dict(
        _CPU_COMMON,
        intermediate_size=256,
        max_position_embeddings=66,
        max_train_blocks=0,
        local_epochs=3,
        batch_size=8,
        learning_rate=4e-3,
        eval_batches=21,
        eval_masks=5,
    ),
    "llama": dict(_CPU_COMMON, n_kv_head=2, intermediate_size=256, max_position_embeddings=64),
}

# The quickstart's: the cpu preset made shorter (20 rounds; screening activates around round 7), with half the
# evaluation blocks for GPT and LLaMA (12k tokens) and a lighter BERT (32 blocks per client, two epochs, one mask
# draw), so that clean FedAvg, FedAvg and FedLNS under attack and the oracle of all three families take minutes.
QUICK = {
    "gpt": dict(CPU["gpt"], rounds=20, eval_batches=6),
    "bert": dict(CPU["bert"], rounds=20, max_train_blocks=3200, local_epochs=2, eval_masks=1),
    "llama": dict(CPU["llama"], rounds=20, eval_batches=6),
}

# Seconds: for tests and CI.
_SMOKE_COMMON = dict(
    num_clients=10,
    participation=0.5,
    rounds=4,
    tokenizer="bpe",
    vocab_size=128,
    block_size=16,
    max_train_blocks=80,
    eval_batches=2,
    eval_batch_size=16,
    n_layer=1,
    n_embd=16,
    n_head=2,
    max_position_embeddings=16,
    dropout=0.0,
    local_epochs=1,
    batch_size=4,
    learning_rate=3e-3,
    max_train_examples=0,
    max_eval_examples=200,
    threads=1,
)
SMOKE = {
    "gpt": dict(_SMOKE_COMMON),
    "bert": dict(_SMOKE_COMMON, intermediate_size=32, max_position_embeddings=18),
    "llama": dict(_SMOKE_COMMON, n_kv_head=1, intermediate_size=32),
}

# The fine-tuning scenario at CPU scale (finetune.py): the `cpu` preset's models and federation, a base model
# pretrained centrally on WikiText, then federated LoRA (+ norms) fine-tuning on another corpus (StackOverflow for
# the causal models, Tiny Shakespeare for BERT). The learning rate was chosen from FedAvg runs alone (GPT, IID, seeds 11
# and 12; docs/results/lora/README.md): the lowest clean perplexity among 2e-3, 5e-3 and 1e-2 whose 40% attack costs
# FedAvg at least 15% at the best checkpoint on both seeds.
_LORA_COMMON = dict(
    pretrain_corpus="wikitext",
    pretrain_steps=2000,
    pretrain_batch_size=16,
    pretrain_learning_rate=2e-3,
    peft="lora",
    lora_r=8,
    lora_alpha=16,
    learning_rate=1e-2,
)
LORA = {
    "gpt": dict(CPU["gpt"], **_LORA_COMMON, corpus="stackoverflow"),
    "bert": dict(CPU["bert"], **_LORA_COMMON, corpus="shakespeare"),
    "llama": dict(CPU["llama"], **_LORA_COMMON, corpus="stackoverflow"),
}

# preset -> family -> overrides (annotated: mypy would join the presets' differing inferred types to object)
PRESETS: dict[str, dict] = {"paper": PAPER, "cpu": CPU, "quick": QUICK, "smoke": SMOKE, "lora": LORA}


def _check_type(key: str, value, expected: type):
    if isinstance(value, bool) and expected is not bool:
        raise TypeError(f"config key {key!r} expects {expected.__name__}, got bool {value!r}")
    if expected is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, expected):
        raise TypeError(f"config key {key!r} expects {expected.__name__}, got {type(value).__name__} {value!r}")
    return value


def _field_types() -> dict[str, type]:
    types = {"str": str, "int": int, "float": float, "bool": bool}
    return {f.name: types[f.type] if isinstance(f.type, str) else f.type for f in dataclasses.fields(Config)}


def apply_overrides(config: Config, overrides: dict) -> Config:
    """Return a copy of ``config`` with ``overrides``; unknown keys and wrong types raise.

    Examples
    --------
    >>> apply_overrides(Config(), {"rounds": 3}).rounds
    3
    >>> apply_overrides(Config(), {"round": 3})
    Traceback (most recent call last):
    ...
    KeyError: "unknown config key 'round'"
    """
    types = _field_types()
    clean = {}
    for key, value in overrides.items():
        if key not in types:
            raise KeyError(f"unknown config key {key!r}")
        clean[key] = _check_type(key, value, types[key])
    return dataclasses.replace(config, **clean)


def parse_override(text: str) -> tuple[str, object]:
    """Parse ``key=value`` from the command line into a typed pair (the type comes from the field)."""
    if "=" not in text:
        raise ValueError(f"override {text!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    types = _field_types()
    if key not in types:
        raise KeyError(f"unknown config key {key!r}")
    expected = types[key]
    try:
        if expected is bool:
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return key, raw.lower() in ("true", "1")
        return key, expected(raw)
    except ValueError:
        raise TypeError(f"config key {key!r} expects {expected.__name__}, got {raw!r}") from None


def make_config(preset: str = "paper", family: str = "gpt", **overrides) -> Config:
    """Build a validated config from a preset, a family, and keyword overrides.

    Examples
    --------
    >>> c = make_config("cpu", "llama", method="fedavg")
    >>> (c.family, c.n_layer, c.clients_per_round, c.activation_threshold)
    ('llama', 2, 10, 50)
    """
    if preset not in PRESETS:
        raise KeyError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    config = apply_overrides(Config(family=family), PRESETS[preset][family])
    return apply_overrides(config, overrides).validate()


def config_from_dict(values: dict) -> Config:
    """Rebuild a config from its JSON form (unknown keys raise; a setting the form predates takes its LEGACY
    value, else its default)."""
    return apply_overrides(Config(), {**LEGACY, **values}).validate()
