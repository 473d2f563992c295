"""Corpora, tokenizers and fixed-length blocks for the three model families.

Data folder layout (``--data DIR`` or ``$FEDLNS_DATA``; ``../shared/data`` has it)::

    DIR/wikitext-2-raw/wiki.{train,valid}.raw          GPT, preferred (the official splits)
    DIR/wikitext-2-partial/wiki.test.raw               GPT fallback: train on the raw *test* split ...
    DIR/wikitext-2-partial/wiki.valid.tokens           ... evaluate on the official validation split (tokenized form)
    DIR/tiny-shakespeare/input.txt                     BERT: first 90% train, final 10% evaluation
    DIR/stackoverflow-posts/{train,valid}.txt          LLaMA: one post per line
    DIR/tokenizers/{gpt2,bert-base-uncased,llama}/     tokenizer files (vocab.json+merges.txt, vocab.txt, tokenizer.model)

Without a data folder every family uses a synthetic corpus the project generates itself (``synthetic_corpus``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .config import CORPORA, FAMILY_CORPUS

TOKENIZER_FOLDERS = {"gpt": "gpt2", "bert": "bert-base-uncased", "llama": "llama"}
IGNORE = -100  # target value of positions without supervision (torch's cross-entropy ignore_index)


@dataclass
class Tokenizer:
    """The little the simulator needs from a tokenizer."""

    encode: Callable[[str], list[int]]  # no special tokens added
    vocab_size: int
    special_ids: tuple[int, ...]  # never corrupted into, never masked
    eos_id: int | None = None
    cls_id: int | None = None
    sep_id: int | None = None
    mask_id: int | None = None
    name: str = ""


@dataclass
class Corpus:
    """Tokenized blocks of one family: ``train`` and ``eval`` are (n_blocks, block_size) int64 arrays."""

    train: np.ndarray
    eval: np.ndarray
    tokenizer: Tokenizer
    task: str  # "causal" | "mlm"
    source: str  # where the text came from, for the run record


def resolve_data_dir(data: str = "") -> Path | None:
    """The data folder: the explicit argument, else ``$FEDLNS_DATA``, else ``../shared/data``, else None.

    ``data="synthetic"`` forces the synthetic corpus (None).
    A folder named explicitly (the argument or ``$FEDLNS_DATA``) that does not exist is an error, never silently
    replaced by another one.
    """
    if data == "synthetic":
        return None
    for candidate, origin in ((data, "--data"), (os.environ.get("FEDLNS_DATA", ""), "$FEDLNS_DATA")):
        if candidate == "synthetic":
            return None
        if candidate:
            if not Path(candidate).is_dir():
                raise FileNotFoundError(f"data folder {candidate!r} (from {origin}) does not exist")
            return Path(candidate).resolve()
    fallback = Path("../shared/data")
    return fallback.resolve() if fallback.is_dir() else None


# ----------------------------------------------------------------------------------------------- text


def synthetic_corpus(seed: int = 0, n_train: int = 1500, n_eval: int = 200) -> tuple[list[str], list[str]]:
    """A learnable toy language: 400 pseudo-words, each followed by one of a few likely successors.

    Examples
    --------
    >>> train, test = synthetic_corpus(n_train=3, n_eval=1)
    >>> len(train), len(test), train == synthetic_corpus(n_train=3, n_eval=1)[0]
    (3, 1, True)
    """
    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "da", "ve", "zu", "qua", "ber", "tin", "gol", "fa"]
    words = sorted({"".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(600)})[:400]
    successors = rng.integers(0, len(words), size=(len(words), 4))  # (n_words, 4) likely next words

    def sentence() -> str:
        current = int(rng.integers(len(words)))
        out = [words[current]]
        for _ in range(int(rng.integers(8, 30))):
            current = int(successors[current, rng.integers(4)]) if rng.random() < 0.9 else int(rng.integers(len(words)))
            out.append(words[current])
        return " ".join(out) + " ."

    lines = [sentence() for _ in range(n_train + n_eval)]
    return lines[:n_train], lines[n_train:]


def _read_lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _detokenize_wikitext(line: str) -> str:
    # the tokenized WikiText files split "1@,@000" style numbers and hyphens; undo that for a BPE tokenizer
    return line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")


def load_texts(
    corpus: str, data_dir: Path | None, max_train: int = 0, max_eval: int = 0
) -> tuple[list[str], list[str], str]:
    """Training and evaluation documents of a corpus (see ``config.CORPORA``; a family's name stands for its own
    corpus), and a description of their source."""
    corpus = FAMILY_CORPUS.get(corpus, corpus)
    if data_dir is None:
        train, test = synthetic_corpus()
        source = "synthetic corpus (fedlns_sim.data.synthetic_corpus, seed 0)"
    elif corpus == "wikitext":
        full = data_dir / "wikitext-2-raw"
        partial = data_dir / "wikitext-2-partial"
        if (full / "wiki.train.raw").is_file():
            train, test = _read_lines(full / "wiki.train.raw"), _read_lines(full / "wiki.valid.raw")
            source = "WikiText-2 raw: train split / validation split"
        elif (partial / "wiki.test.raw").is_file():
            train = _read_lines(partial / "wiki.test.raw")
            test = [_detokenize_wikitext(x) for x in _read_lines(partial / "wiki.valid.tokens")]
            source = (
                "WikiText-2 substitution (no train split offline): train on the raw test split, "
                "evaluate on the official validation split (tokenized form, detokenized)"
            )
        else:
            raise FileNotFoundError(f"{data_dir}: no wikitext-2-raw/wiki.train.raw or wikitext-2-partial/wiki.test.raw")
    elif corpus == "shakespeare":
        text = (data_dir / "tiny-shakespeare" / "input.txt").read_text(encoding="utf-8")
        cut = text.rfind("\n", 0, int(0.9 * len(text))) + 1  # final 10% of the text is the evaluation split
        train, test = _read_lines_from(text[:cut]), _read_lines_from(text[cut:])
        source = "Tiny Shakespeare: first 90% train, final 10% evaluation"
    elif corpus == "stackoverflow":
        folder = data_dir / "stackoverflow-posts"
        train, test = _read_lines(folder / "train.txt"), _read_lines(folder / "valid.txt")
        source = "StackOverflow posts: train.txt / valid.txt"
    else:
        raise ValueError(f"unknown corpus {corpus!r}; one of {CORPORA}")
    if max_train:
        train = train[:max_train]
    if max_eval:
        test = test[:max_eval]
    return train, test, source


def _read_lines_from(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


# ----------------------------------------------------------------------------------------------- tokenizers


def _wrap(backend, name: str, mask_token=None, cls_token=None, sep_token=None, eos_token=None) -> Tokenizer:
    """Wrap a ``tokenizers.Tokenizer``."""

    def ids(token):
        return None if token is None else backend.token_to_id(token)

    specials = [tid for tok, tid in backend.get_vocab().items() if tok in _SPECIAL_NAMES]
    return Tokenizer(
        encode=lambda text: backend.encode(text, add_special_tokens=False).ids,
        vocab_size=backend.get_vocab_size(),
        special_ids=tuple(sorted(specials)),
        eos_id=ids(eos_token),
        cls_id=ids(cls_token),
        sep_id=ids(sep_token),
        mask_id=ids(mask_token),
        name=name,
    )


_SPECIAL_NAMES = {"<|endoftext|>", "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<unk>", "<s>", "</s>", "<pad>"}


def load_pretrained_tokenizer(family: str, data_dir: Path | None) -> Tokenizer:
    """The paper's tokenizer of a family, from ``DIR/tokenizers/<name>`` (or the hub by name if no folder).

    ``AutoTokenizer.from_pretrained(folder)`` is tried first; the offline folders hold only the vocabulary files,
    which transformers 5 cannot always turn into a fast tokenizer, so the files are then read directly.
    """
    name = TOKENIZER_FOLDERS[family]
    folder = data_dir / "tokenizers" / name if data_dir is not None else None
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(
            str(folder) if folder is not None else {"llama": "TinyLlama/TinyLlama-1.1B-Chat-v1.0"}.get(family, name)
        )
        return Tokenizer(
            encode=lambda text: hf(text, add_special_tokens=False)["input_ids"],
            vocab_size=len(hf),
            special_ids=tuple(sorted(set(hf.all_special_ids))),
            eos_id=hf.eos_token_id,
            cls_id=hf.cls_token_id,
            sep_id=hf.sep_token_id,
            mask_id=hf.mask_token_id,
            name=name,
        )
    except Exception:
        if folder is None:
            raise
    from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer

    if family == "gpt":
        backend = ByteLevelBPETokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
        return _wrap(backend, name, eos_token="<|endoftext|>")
    if family == "bert":
        backend = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True)
        return _wrap(backend, name, mask_token="[MASK]", cls_token="[CLS]", sep_token="[SEP]")
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    specials = tuple(i for i in (processor.unk_id(), processor.bos_id(), processor.eos_id()) if i >= 0)
    return Tokenizer(
        encode=processor.encode,
        vocab_size=processor.vocab_size(),
        special_ids=specials,
        eos_id=processor.eos_id(),
        name=name,
    )


def train_bpe_tokenizer(family: str, texts: list[str], vocab_size: int, cache: Path) -> Tokenizer:
    """Train a small vocabulary on the training split (cached as ``tokenizer.json``; the cache is reused).

    GPT/LLaMA get byte-level BPE with their EOS token; BERT gets a lowercase WordPiece with [CLS]/[SEP]/[MASK].
    """
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    if cache.is_file():
        backend = Backend.from_file(str(cache))
    else:
        trainer: trainers.Trainer  # WordPiece for BERT, BPE for the others
        if family == "bert":
            specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
            backend = Backend(models.WordPiece(unk_token="[UNK]"))
            backend.normalizer = normalizers.BertNormalizer(lowercase=True)
            backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            backend.decoder = decoders.WordPiece()
            trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
        else:
            specials = ["<|endoftext|>"] if family == "gpt" else ["<unk>", "<s>", "</s>"]
            backend = Backend(models.BPE())
            backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            backend.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(
                vocab_size=vocab_size,
                special_tokens=specials,
                show_progress=False,
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            )
        backend.train_from_iterator(texts, trainer=trainer)
        if family == "bert":
            # The WordPiece trainer numbers equally frequent tokens in hash order: two trainings on the same
            # text gave the same vocabulary under different ids (so different numbers for the same seed).
            # Renumber canonically, the special tokens first, then the rest in sorted order.
            rest = sorted(token for token in backend.get_vocab() if token not in specials)
            backend.model = models.WordPiece(
                vocab={token: i for i, token in enumerate(specials + rest)}, unk_token="[UNK]"
            )
        cache.parent.mkdir(parents=True, exist_ok=True)
        temporary = cache.with_name(cache.name + f".tmp{os.getpid()}")
        backend.save(str(temporary))
        os.replace(temporary, cache)
    if family == "bert":
        return _wrap(backend, f"bpe{vocab_size}", mask_token="[MASK]", cls_token="[CLS]", sep_token="[SEP]")
    return _wrap(backend, f"bpe{vocab_size}", eos_token="<|endoftext|>" if family == "gpt" else "</s>")


# ----------------------------------------------------------------------------------------------- blocks


def causal_blocks(documents: list[list[int]], block_size: int, eos_id: int | None) -> np.ndarray:
    """Concatenate documents (each followed by EOS) and cut into full blocks: (n_blocks, block_size)."""
    stream = []
    for ids in documents:
        stream.extend(ids)
        if eos_id is not None:
            stream.append(eos_id)
    n_blocks = len(stream) // block_size
    return np.asarray(stream[: n_blocks * block_size], dtype=np.int64).reshape(n_blocks, block_size)


def mlm_blocks(documents: list[list[int]], block_size: int, cls_id: int, sep_id: int) -> np.ndarray:
    """Blocks of ``[CLS] + (block_size - 2) tokens + [SEP]``: (n_blocks, block_size)."""
    body = causal_blocks(documents, block_size - 2, None)
    n = len(body)
    return np.concatenate([np.full((n, 1), cls_id), body, np.full((n, 1), sep_id)], axis=1).astype(np.int64)


def bpe_tokenizer(config, train_texts: list[str], source: str, cache_dir: Path) -> Tokenizer:
    """The family's small vocabulary trained on ``train_texts`` (cached under a key of the texts and size)."""
    key = hashlib.sha1(
        json.dumps([config.family, source, config.vocab_size, len(train_texts), train_texts[:3]]).encode()
    ).hexdigest()[:12]
    return train_bpe_tokenizer(
        config.family, train_texts, config.vocab_size, cache_dir / f"tokenizer-{config.family}-{key}.json"
    )


def build_corpus(config, data_dir: Path | None, cache_dir: Path, tokenizer: Tokenizer | None = None) -> Corpus:
    """Texts -> tokenizer -> blocks, with the limits of the config. ``tokenizer`` (a pretrained base model's)
    replaces the one the config would build."""
    train_texts, eval_texts, source = load_texts(
        config.corpus or config.family, data_dir, config.max_train_examples, config.max_eval_examples
    )
    if tokenizer is None and config.tokenizer == "bpe":
        tokenizer = bpe_tokenizer(config, train_texts, source, cache_dir)
    elif tokenizer is None:
        tokenizer = load_pretrained_tokenizer(config.family, data_dir)
    n_train_needed = config.max_train_blocks * config.block_size if config.max_train_blocks else None
    n_eval_needed = config.eval_batches * config.eval_batch_size * config.block_size
    train_docs = _encode_until(tokenizer, train_texts, n_train_needed)
    eval_docs = _encode_until(tokenizer, eval_texts, n_eval_needed)
    if config.family == "bert":
        assert tokenizer.cls_id is not None and tokenizer.sep_id is not None  # BERT tokenizers set both
        train = mlm_blocks(train_docs, config.block_size, tokenizer.cls_id, tokenizer.sep_id)
        test = mlm_blocks(eval_docs, config.block_size, tokenizer.cls_id, tokenizer.sep_id)
    else:
        train = causal_blocks(train_docs, config.block_size, tokenizer.eos_id)
        test = causal_blocks(eval_docs, config.block_size, tokenizer.eos_id)
    if config.max_train_blocks:
        train = train[: config.max_train_blocks]
    test = test[: config.eval_batches * config.eval_batch_size]
    if len(train) < config.num_clients or len(test) == 0:
        raise ValueError(
            f"{config.corpus or config.family}: {len(train)} training blocks for {config.num_clients} clients and "
            f"{len(test)} evaluation blocks; use more text or a smaller block_size"
        )
    return Corpus(
        train=train, eval=test, tokenizer=tokenizer, task="mlm" if config.family == "bert" else "causal", source=source
    )


def _encode_until(tokenizer: Tokenizer, texts: list[str], n_tokens: int | None) -> list[list[int]]:
    # tokenizing a whole split is the slow part at CPU scale; stop once the blocks needed are covered
    out, total = [], 0
    for text in texts:
        ids = tokenizer.encode(text)
        out.append(ids)
        total += len(ids) + 1
        if n_tokens is not None and total >= n_tokens * 1.05 + 512:
            break
    return out


# ----------------------------------------------------------------------------------------------- targets


def causal_targets(blocks: torch.Tensor) -> torch.Tensor:
    """Next-token targets: position j predicts token j+1; the last position has none. Shapes (B, L)."""
    targets = torch.full_like(blocks, IGNORE)
    targets[:, :-1] = blocks[:, 1:]
    return targets


def mask_for_mlm(
    blocks: torch.Tensor, tokenizer: Tokenizer, probability: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: pick ``probability`` of the non-special positions; 80% [MASK], 10% random, 10% kept.

    Returns ``(inputs, targets)``; targets hold the original token at picked positions and IGNORE elsewhere.
    """
    special = torch.isin(blocks, torch.tensor(tokenizer.special_ids, dtype=blocks.dtype))
    picked = (torch.rand(blocks.shape, generator=generator) < probability) & ~special
    targets = torch.where(picked, blocks, torch.full_like(blocks, IGNORE))
    draw = torch.rand(blocks.shape, generator=generator)
    inputs = blocks.clone()
    assert tokenizer.mask_id is not None  # MLM masking: a BERT tokenizer, which has [MASK]
    inputs[picked & (draw < 0.8)] = tokenizer.mask_id
    randomised = picked & (draw >= 0.8) & (draw < 0.9)
    candidates = valid_target_ids(tokenizer)
    inputs[randomised] = candidates[torch.randint(len(candidates), (int(randomised.sum()),), generator=generator)]
    return inputs, targets


def evaluation_set(
    blocks: np.ndarray, task: str, tokenizer: Tokenizer, mlm_probability: float, masks: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed (inputs, targets) every round is evaluated on: next-token targets, or for MLM ``masks``
    independent masking draws of the blocks stacked (one draw scores only ~15% of the tokens).

    Examples
    --------
    >>> blocks = np.arange(12).reshape(3, 4)
    >>> inputs, targets = evaluation_set(blocks, "causal", None, 0.15, masks=5, seed=0)
    >>> tuple(inputs.shape), targets[0].tolist()
    ((3, 4), [1, 2, 3, -100])
    """
    data = torch.from_numpy(blocks)
    if task != "mlm":
        return data, causal_targets(data)
    generator = torch.Generator().manual_seed(seed)
    draws = [mask_for_mlm(data, tokenizer, mlm_probability, generator) for _ in range(masks)]
    return torch.cat([inputs for inputs, _ in draws]), torch.cat([targets for _, targets in draws])


def valid_target_ids(tokenizer: Tokenizer) -> torch.Tensor:
    """Token ids that are not padding, EOS or any other special token."""
    keep = torch.ones(tokenizer.vocab_size, dtype=torch.bool)
    keep[list(tokenizer.special_ids)] = False
    return torch.nonzero(keep).flatten()
