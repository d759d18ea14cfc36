"""Build the reference translator into the cache: corpus, tokenizer, training, ONNX, INT8.

`python -m models.translator build` trains (resuming) and exports `encoder.onnx` and
`decoder.onnx`; `python -m models.translator quantize` calibrates both graphs on real
sentences from the dev split and writes `encoder.int8.onnx` and `decoder.int8.onnx`.
"""

from pathlib import Path

from models.translator.corpus import build_corpus, read_split
from models.translator.evaluate import calibration_feeds
from models.translator.network import SMALL
from models.translator.train import build_model, prepare, train
from models.translator.translate import TranslatorFiles, default_folder
from onnxio import save_model
from quantize.pipeline import QuantizeResult, quantize
from quantize.recipe import Recipe

CALIBRATION_SENTENCES = 256


def build(minutes: float = float("inf"), log=print) -> TranslatorFiles:
    from models.translator.export import export

    out = default_folder()
    files = TranslatorFiles.in_folder(out)
    weights = train(out, prepare(out, SMALL), SMALL, minutes=minutes, log=log)
    if not files.decoder.exists() or files.decoder.stat().st_mtime < weights.stat().st_mtime:
        export(build_model(SMALL, weights), out)
    return files


def calibration_sentences() -> list[str]:
    return [p.english for p in read_split(build_corpus(), "dev")[:CALIBRATION_SENTENCES]]


def quantize_translator(
    files: TranslatorFiles,
    recipe: Recipe,
    feeds: dict[str, list[dict]] | None = None,
    suffix: str = ".int8",
) -> tuple[TranslatorFiles, dict[str, QuantizeResult]]:
    """Both graphs quantized with `recipe`, calibrated on dev-split sentences (or `feeds`)."""
    feeds = feeds or calibration_feeds(files, calibration_sentences())
    results = {}

    def quantize_graph(graph: str, source: Path):
        results[graph] = quantize(source, feeds[graph], recipe)
        return results[graph].model

    return map_graphs(files, suffix, quantize_graph), results


def map_graphs(files: TranslatorFiles, suffix: str, transform) -> TranslatorFiles:
    """`transform(graph name, path) -> ModelProto` applied to the encoder and the decoder, saved
    beside them as encoder`suffix`.onnx and decoder`suffix`.onnx."""
    out = TranslatorFiles(
        files.encoder.with_suffix(f"{suffix}.onnx"),
        files.decoder.with_suffix(f"{suffix}.onnx"),
        files.tokenizer,
    )
    for graph in ("encoder", "decoder"):
        save_model(transform(graph, getattr(files, graph)), getattr(out, graph))
    return out
