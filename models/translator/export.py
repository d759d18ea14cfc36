"""Export the trained translator as two ONNX graphs: `encoder.onnx` and `decoder.onnx`.

encoder: source (batch, positions) int32 -> cross_key_i, cross_value_i for each decoder
         layer i (batch, heads, positions, depth), source_bias (batch, 1, 1, positions)
decoder: token, position (batch, 1) int32, source_bias, past_key_i, past_value_i (batch,
         heads, steps, depth), cross_key_i, cross_value_i -> logits (batch, vocab),
         present_key_i, present_value_i (the past grown by one step)
"""

from pathlib import Path

import onnx

from models.translator.network import Transformer
from onnxio import save_model
from quantize.frontend.tensorflow import EXPORT_OPSET


def cache_names(kind: str, layers: int) -> list[str]:
    """`kind`_key_0, `kind`_value_0, `kind`_key_1, ... in the order the graphs take them."""
    return [f"{kind}_{part}_{i}" for i in range(layers) for part in ("key", "value")]


def export(model: Transformer, out: Path) -> tuple[Path, Path]:
    import tensorflow as tf
    import tf2onnx

    c = model.config
    cache = (None, c.heads, None, c.depth)
    layers = c.decoder_layers

    def pairs(flat):
        return [(flat[2 * i], flat[2 * i + 1]) for i in range(layers)]

    def encode(source):
        cross, source_bias = model.encode(source)
        return [t for kv in cross for t in kv] + [source_bias]

    def decode(token, position, source_bias, *caches):
        logits, present = model.decode_step(
            token, position, pairs(caches[: 2 * layers]), pairs(caches[2 * layers :]), source_bias
        )
        return [logits] + [t for kv in present for t in kv]

    encoder_specs = [tf.TensorSpec((None, None), tf.int32, name="source")]
    decoder_specs = [
        tf.TensorSpec((None, 1), tf.int32, name="token"),
        tf.TensorSpec((None, 1), tf.int32, name="position"),
        tf.TensorSpec((None, 1, 1, None), tf.float32, name="source_bias"),
    ]
    decoder_specs += [
        tf.TensorSpec(cache, tf.float32, name=n)
        for n in cache_names("past", layers) + cache_names("cross", layers)
    ]
    paths = []
    for name, fn, specs, outputs in (
        ("encoder", encode, encoder_specs, cache_names("cross", layers) + ["source_bias"]),
        ("decoder", decode, decoder_specs, ["logits"] + cache_names("present", layers)),
    ):
        proto, _ = tf2onnx.convert.from_function(
            tf.function(fn, input_signature=specs), input_signature=specs, opset=EXPORT_OPSET
        )
        _rename_outputs(proto, outputs)
        onnx.helper.set_model_props(proto, {"max_len": str(c.max_len)})
        path = out / f"{name}.onnx"
        save_model(proto, path)
        paths.append(path)
    return paths[0], paths[1]


def _rename_outputs(model: onnx.ModelProto, names: list[str]) -> None:
    """tf2onnx names outputs after TF tensors; give them the names the decoder loop uses."""
    renames = {out.name: new for out, new in zip(model.graph.output, names)}
    for node in model.graph.node:
        node.output[:] = [renames.get(o, o) for o in node.output]
        node.input[:] = [renames.get(i, i) for i in node.input]
    for out in model.graph.output:
        out.name = renames[out.name]
