"""A joint English-German sentencepiece vocabulary trained on the train split."""

from pathlib import Path

import sentencepiece as spm

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def train_tokenizer(texts: list[str], prefix: Path, vocab_size: int) -> Path:
    """Train a unigram model on `texts`; writes `prefix`.model and returns its path."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        num_threads=2,
        minloglevel=2,
    )
    return Path(f"{prefix}.model")


def load_tokenizer(path: Path) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(path))
