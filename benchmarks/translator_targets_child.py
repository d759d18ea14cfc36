"""`python -m benchmarks.translator_targets_child SPEC.json`: translations of the sentences in
SPEC by each model in SPEC, as JSON on stdout. benchmarks.translator_targets runs it under AVX2
emulation."""

import json
import sys
from pathlib import Path

from models.translator.translate import Translator, TranslatorFiles
from quantize.batcher import pack
from quantize.target import host_isa

TOKEN_BUDGET, MAX_BATCH = 4096, 256


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    english = spec["sentences"]
    out = {}
    for name, model in spec["models"].items():
        files = TranslatorFiles(
            Path(model["encoder"]), Path(model["decoder"]), Path(spec["tokenizer"])
        )
        translator = Translator(files, threads=0, exact_kernels=model["exact_kernels"])
        german, done = [""] * len(english), 0
        for batch in pack(translator.token_lengths(english), TOKEN_BUDGET, MAX_BATCH):
            for i, line in zip(batch, translator([english[i] for i in batch])):
                german[i] = line
            done += len(batch)
            print(f"{name}: {done}/{len(english)} sentences", file=sys.stderr, flush=True)
        out[name] = german
    print(json.dumps({"isa": host_isa(), "translations": out}))


if __name__ == "__main__":
    main()
