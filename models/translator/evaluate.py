"""BLEU of a translator on a corpus split, and real calibration feeds for its two graphs."""

import dataclasses

import numpy as np
import sacrebleu

from models.translator.corpus import Pair, build_corpus, read_split
from models.translator.translate import Translator, TranslatorFiles, default_folder
from quantize.batcher import BatcherConfig, run_packed


def bleu(
    files: TranslatorFiles,
    pairs: list[Pair],
    beam: int = 1,
    batcher: BatcherConfig = BatcherConfig(),
) -> tuple[float, list[str]]:
    """Corpus BLEU (sacrebleu, 13a tokenisation) of the translations of `pairs`, and the translations."""
    english = [p.english for p in pairs]
    lengths = Translator(files, threads=1).token_lengths(english)
    hypotheses = run_packed(
        english, lengths, lambda threads: Translator(files, threads, beam), batcher
    )
    return sacrebleu.corpus_bleu(hypotheses, [[p.german for p in pairs]]).score, hypotheses


def calibration_feeds(
    files: TranslatorFiles, texts: list[str], batch: int = 16, every_step: int = 2
) -> dict[str, list[dict]]:
    """{"encoder": feeds, "decoder": feeds} recorded while greedily translating `texts` in FP32.

    Sentences are batched by length as the batcher would; every `every_step`-th decoder step
    is kept, so cache lengths span their whole range without every step held in memory."""
    translator = Translator(files)
    feeds: dict[str, list[dict]] = {"encoder": [], "decoder": []}
    steps = [0]

    def keep(graph: str, feed: dict) -> None:
        if graph == "encoder" or steps[0] % every_step == 0:
            feeds[graph].append(dict(feed))
        steps[0] += graph == "decoder"

    translator.observe = keep
    order = np.argsort([len(t) for t in texts])
    for start in range(0, len(texts), batch):
        translator([texts[i] for i in order[start : start + batch]])
    return feeds


class BleuEvaluator:
    """BLEU on the test split with one of the two graphs replaced by the model under test (the
    other stays the reference FP32 one), for the core's validation report."""

    metric = "BLEU"
    higher_is_better = True

    def __init__(
        self, graph: str, files: TranslatorFiles | None = None, pairs: list[Pair] | None = None
    ):
        self.graph, self.name = graph, f"translator-{graph}"
        self.files = files or TranslatorFiles.in_folder(default_folder())
        self.pairs = pairs if pairs is not None else read_split(build_corpus(), "test")

    def evaluate(self, model) -> float:
        return bleu(dataclasses.replace(self.files, **{self.graph: model}), self.pairs)[0]


def encoder_bleu() -> BleuEvaluator:
    return BleuEvaluator("encoder")


def decoder_bleu() -> BleuEvaluator:
    return BleuEvaluator("decoder")
