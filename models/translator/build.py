"""Build the reference translator into the cache: corpus, tokenizer, training, ONNX, INT8.

`python -m models.translator build` trains (resuming) and exports `encoder.onnx` and
`decoder.onnx`; `python -m models.translator quantize` calibrates both graphs on real
sentences from the dev split and writes `encoder.int8.onnx` and `decoder.int8.onnx`.
"""

from models.translator.corpus import build_corpus, read_split
from models.translator.evaluate import calibration_feeds
from models.translator.network import SMALL
from models.translator.train import build_model, prepare, train
from models.translator.translate import TranslatorFiles, default_folder
from quantize.config import QuantConfig
from quantize.modelio import save_model
from quantize.pipeline import QuantizeResult, quantize_

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


def quantize_translator(files: TranslatorFiles, config: QuantConfig, feeds: dict[str, list[dict]] | None = None,
                        suffix: str = ".int8") -> tuple[TranslatorFiles, dict[str, QuantizeResult]]:
    """Both graphs quantized with `config`, calibrated on dev-split sentences (or `feeds`)."""
    feeds = feeds or calibration_feeds(files, calibration_sentences())
    int8 = TranslatorFiles(files.encoder.with_suffix(f"{suffix}.onnx"), files.decoder.with_suffix(f"{suffix}.onnx"), files.tokenizer)
    results = {}
    for graph, source, target in (("encoder", files.encoder, int8.encoder), ("decoder", files.decoder, int8.decoder)):
        results[graph] = quantize_(source, feeds[graph], config)
        save_model(results[graph].model, target)
    return int8, results
