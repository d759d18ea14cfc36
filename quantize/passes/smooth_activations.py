"""Move activation outliers into the weights before quantization (SmoothQuant, Xiao et al. 2023).

Transformers carry a few LayerNorm and GELU output channels far larger than the rest; one
uint8 scale per tensor then leaves the ordinary channels a handful of levels. For an input X of weight GEMMs X.W, dividing channel j of X by s_j and multiplying
row j of every W by s_j computes the same function, and with
s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) both sides become easy to quantize: the weights
are per-channel anyway.

Where X comes from a LayerNormalization read only by those GEMMs, 1/s is folded into its
gamma and beta; where it comes from a Mul by a constant, into that constant (both free);
otherwise one FP32 Mul by 1/s feeds the GEMMs, and any other reader of X keeps the unscaled
tensor. The 0.5 that ends an Erf GELU is a Mul by a constant but keeps its value: ONNX Runtime
fuses the GELU (and the bias before it) into one kernel only when it reads 0.5, and the five
unfused element-wise ops cost more than the one scaling Mul.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import add_initializer

OUTLIER_RATIO = 3.0  # a channel this many times the median channel's range is an outlier
GELU_DEPTH = 4  # x * 0.5 * (1 + erf(x / sqrt 2)): Erf is at most this many nodes above the last Mul


def weight_gemm_readers(value: ir.Value) -> list[ir.Node]:
    """MatMul/Gemm nodes that read `value` as their input A against a constant weight B."""
    readers = []
    for user, index in value.uses():
        transposed_a = (
            user.op_type == "Gemm"
            and "transA" in user.attributes
            and user.attributes["transA"].value
        )
        weight = user.inputs[1] if len(user.inputs) > 1 else None
        if (
            user.op_type in ("MatMul", "Gemm")
            and index == 0
            and not transposed_a
            and weight is not None
            and weight.const_value is not None
            and len(weight.const_value.shape) == 2
        ):
            readers.append(user)
    return readers


def _transposed_weight(gemm: ir.Node) -> bool:
    return (
        gemm.op_type == "Gemm" and "transB" in gemm.attributes and gemm.attributes["transB"].value
    )


def weight_rows(gemm: ir.Node) -> np.ndarray:
    """The weight as (input channels, output channels)."""
    w = gemm.inputs[1].const_value.numpy()
    return w.T if _transposed_weight(gemm) else w


def is_gelu(node: ir.Node) -> bool:
    """A Gelu op, or the last node of a GELU written out with Erf or Tanh (as exporters do)."""
    if node.op_type in ("Gelu", "FastGelu", "BiasGelu"):
        return True
    frontier = [node]
    for _ in range(GELU_DEPTH):
        frontier = [
            p
            for n in frontier
            for v in n.inputs
            if v is not None and (p := v.producer()) is not None
        ]
        if any(n.op_type in ("Erf", "Tanh") for n in frontier):
            return node.op_type == "Mul"
    return False


def smoothing_scales(
    model: ir.Model, activation_absmax: dict[str, np.ndarray], alpha: float
) -> dict[str, np.ndarray]:
    """s per channel for every LayerNormalization or GELU output in `activation_absmax` that
    weight GEMMs read and that has outlier channels (without them, smoothing only makes the
    weights harder to quantize; after the translator's ReLU it cost BLEU, after MiniLM's GELU it
    raised the worst sentence's cosine from 0.979 to 0.988)."""
    values = {v.name: v for node in model.graph for v in node.outputs}
    values.update({v.name: v for v in model.graph.inputs})
    scales = {}
    for name, a in activation_absmax.items():
        readers = weight_gemm_readers(values[name]) if name in values else []
        producer = values[name].producer() if name in values else None
        if (
            not readers
            or producer is None
            or not (producer.op_type == "LayerNormalization" or is_gelu(producer))
            or a.max() < OUTLIER_RATIO * np.median(a)
        ):
            continue
        w = np.max([np.abs(weight_rows(g)).max(axis=1) for g in readers], axis=0)
        s = np.where((a > 0) & (w > 0), a**alpha / np.maximum(w, 1e-12) ** (1 - alpha), 1.0)
        scales[name] = np.clip(s, 1e-4, 1e4).astype(np.float32)
    return scales


def scale_weight_rows(graph: ir.Graph, gemm: ir.Node, s: np.ndarray, suffix: str) -> None:
    """Multiplies input channel j of `gemm`'s weight by s_j (a new initializer)."""
    w = gemm.inputs[1].const_value.numpy()
    scaled = w * s[None, :] if _transposed_weight(gemm) else w * s[:, None]
    gemm.replace_input_with(
        1, add_initializer(graph, f"{gemm.name}_{suffix}", scaled.astype(w.dtype))
    )


SCALING_MUL = "quantize.smoothing_mul"  # node meta (in memory, not written to the model)


def scaling_muls(model: ir.Model) -> set[str]:
    """The Muls a SmoothActivationsPass inserted into `model`."""
    return {node.name for node in model.graph if node.meta.get(SCALING_MUL)}


class SmoothActivationsPass(ir.passes.InPlacePass):
    """Divides each given activation's channels by its smoothing scale and multiplies the rows
    of the weights of the GEMMs reading it by the same scale (see the module docstring).

    The scale goes into a LayerNorm's gamma/beta or a constant Mul where it can, else into a
    new Mul marked `SCALING_MUL` in its meta: FP32 by construction (`scaling_muls` finds them)."""

    def __init__(self, scales: dict[str, np.ndarray]):
        super().__init__()
        self.scales = scales

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        values = {v.name: v for node in graph for v in node.outputs}
        values.update({v.name: v for v in graph.inputs})
        for name, s in self.scales.items():
            value = values[name]
            readers = weight_gemm_readers(value)
            for gemm in readers:
                scale_weight_rows(graph, gemm, s, "smoothed_weight")
            only_gemms = not value.is_graph_output() and {id(u) for u, _ in value.uses()} == {
                id(r) for r in readers
            }
            if not (
                only_gemms
                and (
                    self._fold_into_layernorm(graph, value, s)
                    or self._fold_into_constant_mul(graph, value, s)
                )
            ):
                self._insert_mul(graph, value, readers, s)
        return ir.passes.PassResult(model, modified=bool(self.scales))

    @staticmethod
    def _fold_into_layernorm(graph: ir.Graph, value: ir.Value, s: np.ndarray) -> bool:
        norm = value.producer()
        if norm is None or norm.op_type != "LayerNormalization" or len(norm.inputs) < 3:
            return False
        gamma, beta = norm.inputs[1].const_value, norm.inputs[2].const_value
        if gamma is None or beta is None:
            return False
        norm.replace_input_with(
            1,
            add_initializer(
                graph, f"{norm.name}_smoothed_gamma", (gamma.numpy() / s).astype(np.float32)
            ),
        )
        norm.replace_input_with(
            2,
            add_initializer(
                graph, f"{norm.name}_smoothed_beta", (beta.numpy() / s).astype(np.float32)
            ),
        )
        return True

    @staticmethod
    def _fold_into_constant_mul(graph: ir.Graph, value: ir.Value, s: np.ndarray) -> bool:
        mul = value.producer()
        if mul is None or mul.op_type != "Mul" or is_gelu(mul):
            return False
        for index, operand in enumerate(mul.inputs):
            c = (
                operand.const_value.numpy()
                if operand is not None and operand.const_value is not None
                else None
            )
            if c is not None and c.dtype == np.float32 and c.size in (1, s.size) and c.ndim <= 1:
                mul.replace_input_with(
                    index,
                    add_initializer(
                        graph, f"{mul.name}_smoothed_constant", (c / s).astype(np.float32)
                    ),
                )
                return True
        return False

    def _insert_mul(
        self, graph: ir.Graph, value: ir.Value, readers: list[ir.Node], s: np.ndarray
    ) -> None:
        inverse = add_initializer(graph, f"{value.name}_smoothing", (1 / s).astype(np.float32))
        mul = ir.Node("", "Mul", [value, inverse], name=f"{value.name}_smooth")
        mul.outputs[0].name = f"{value.name}_smoothed"
        mul.outputs[0].type, mul.outputs[0].shape = value.type, value.shape
        producer = value.producer()
        if producer is None:
            graph.insert_before(graph.node(0), mul)
        else:
            graph.insert_after(producer, mul)
        for gemm in readers:
            gemm.replace_input_with(0, mul.outputs[0])
        mul.meta[SCALING_MUL] = True
