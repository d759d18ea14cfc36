"""CTranslate2 running the reference translator's own trained weights: the peer a user serving
a Transformer translator on CPU would pick.

`convert` writes a CTranslate2 model from the Keras `Transformer` (pre-norm, shared source and
target embeddings scaled by sqrt(d_model), our sinusoid table, ReLU FFN, a biased output
layer); `CT2Translator` translates with it greedily, as `models.translator.translate.Translator`
does, so the two are compared on the same sentences. CTranslate2 quantizes to int8 when the
model is loaded with `compute_type="int8"`.
"""

from pathlib import Path

import ctranslate2
import numpy as np
from ctranslate2.specs import TransformerSpec, common_spec

from models.translator.network import Transformer
from models.translator.tokenizer import EOS, load_tokenizer


def convert(model: Transformer, tokenizer: Path, out: Path) -> Path:
    """The model as a CTranslate2 float32 model in `out` (replaced if there)."""
    return Path(_KerasConverter(model, tokenizer).convert(str(out), force=True))


class CT2Translator:
    """Greedy translation with a converted model: `compute_type` "float32" or "int8"."""

    def __init__(self, folder: Path, tokenizer: Path, compute_type: str, threads: int, workers=1):
        self.translator = ctranslate2.Translator(
            str(folder),
            device="cpu",
            compute_type=compute_type,
            intra_threads=threads,
            inter_threads=workers,
        )
        self.tokenizer = load_tokenizer(tokenizer)
        self.eos = self.tokenizer.id_to_piece(EOS)
        self.max_len = len(np.load(folder / "positions.npy"))

    def __call__(self, texts: list[str], token_budget: int = 0) -> list[str]:
        """Translate `texts`; with `token_budget`, CTranslate2 batches them itself (sorted by
        length, at most that many source tokens a batch, batches spread over its workers)."""
        pieces = self.tokenizer.encode(texts, out_type=str)
        source = [p[: self.max_len - 1] + [self.eos] for p in pieces]
        results = self.translator.translate_batch(
            source,
            beam_size=1,
            max_decoding_length=self.max_len - 1,
            max_batch_size=token_budget,
            batch_type="tokens",
        )
        return [
            self.tokenizer.decode_pieces(r.hypotheses[0]) if t.strip() else ""
            for r, t in zip(results, texts)
        ]


class _KerasConverter(ctranslate2.converters.Converter):
    def __init__(self, model: Transformer, tokenizer: Path):
        self.model, self.tokenizer = model, load_tokenizer(tokenizer)

    def _load(self) -> TransformerSpec:
        m, c = self.model, self.model.config
        spec = TransformerSpec.from_config(
            (c.encoder_layers, c.decoder_layers),
            c.heads,
            pre_norm=True,
            activation=common_spec.Activation.RELU,
        )
        embeddings = m.embedding.embeddings.numpy()
        for stack in (spec.encoder, spec.decoder):
            stack.position_encodings.encodings = np.asarray(m.positions)
        spec.encoder.embeddings[0].weight = embeddings
        spec.decoder.embeddings.weight = embeddings
        _norm(spec.encoder.layer_norm, m.encoder_norm)
        _norm(spec.decoder.layer_norm, m.decoder_norm)
        _dense(spec.decoder.projection, m.logits)
        for layer_spec, layer in zip(spec.encoder.layer, m.encoder):
            _self_attention(layer_spec.self_attention, layer.attention, layer.norm1)
            _ffn(layer_spec.ffn, layer.feed_forward, layer.norm2)
        for layer_spec, layer in zip(spec.decoder.layer, m.decoder):
            _self_attention(layer_spec.self_attention, layer.self_attention, layer.norms[0])
            _cross_attention(layer_spec.attention, layer.cross_attention, layer.norms[1])
            _ffn(layer_spec.ffn, layer.feed_forward, layer.norms[2])
        pieces = [self.tokenizer.id_to_piece(i) for i in range(self.tokenizer.get_piece_size())]
        spec.register_source_vocabulary(pieces)
        spec.register_target_vocabulary(pieces)
        return spec

    def convert(self, output_dir: str, **kwargs) -> str:
        out = super().convert(output_dir, **kwargs)
        np.save(Path(out) / "positions.npy", np.asarray(self.model.positions))
        return out


def _dense(spec, dense) -> None:
    """Keras kernels are (in, out); CTranslate2's weights are (out, in)."""
    spec.weight = dense.kernel.numpy().T.copy()
    spec.bias = dense.bias.numpy()


def _norm(spec, norm) -> None:
    spec.gamma, spec.beta = norm.gamma.numpy(), norm.beta.numpy()


def _fused(spec, denses) -> None:
    spec.weight = np.concatenate([d.kernel.numpy().T for d in denses])
    spec.bias = np.concatenate([d.bias.numpy() for d in denses])


def _self_attention(spec, attention, norm) -> None:
    _norm(spec.layer_norm, norm)
    _fused(spec.linear[0], [attention.query, attention.key, attention.value])
    _dense(spec.linear[1], attention.out)


def _cross_attention(spec, attention, norm) -> None:
    _norm(spec.layer_norm, norm)
    _dense(spec.linear[0], attention.query)
    _fused(spec.linear[1], [attention.key, attention.value])
    _dense(spec.linear[2], attention.out)


def _ffn(spec, feed_forward, norm) -> None:
    _norm(spec.layer_norm, norm)
    _dense(spec.linear_0, feed_forward.inner)
    _dense(spec.linear_1, feed_forward.outer)
