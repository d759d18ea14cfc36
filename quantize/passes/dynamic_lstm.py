"""A planned LSTM becomes ONNX Runtime's com.microsoft DynamicQuantizeLSTM: int8 weights.

ORT has no QDQ form of an LSTM, but a contrib kernel that keeps the LSTM's float input and output
and quantizes, on each call, its input and each step's hidden state to uint8 with their own
range, then multiplies them by int8 weights in its integer GEMM (the kernel MLAS runs for a
QGemm). No calibrated range is involved: only the weights are the plan's. The recurrence's GEMM
reads its weights once per time step, so the int8 weights, a quarter of the bytes, are where an
LSTM gains; its element-wise gates stay float.

ONNX's W [D, 4H, in] and R [D, 4H, H] become the kernel's [D, in, 4H] and [D, H, 4H], a
GEMM's B per direction, with one scale per direction and gate channel, in the plan's weight
format (paired pairs bound along the reduction, as for a Gemm's weights).
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import add_initializer
from quantize.plan import QuantPlan
from quantize.qparams import quantize_weight
from quantize.target import WeightFormat

MS_DOMAIN = "com.microsoft"
OP_TYPE = "DynamicQuantizeLSTM"
LSTM_INPUTS = 8  # X, W, R, B, sequence_lens, initial_h, initial_c, P


class DynamicLstmPass(ir.passes.InPlacePass):
    """Rewrites each planned LSTM into DynamicQuantizeLSTM, under its name, its weights int8.

    Precondition: the plan is for ONNX Runtime, the only runtime with that kernel."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def requires(self, model: ir.Model) -> None:
        if self._planned(model) and self.plan.runtime != "onnxruntime":
            raise ir.passes.PreconditionError(f"no {OP_TYPE} in {self.plan.runtime}")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        planned = self._planned(model)
        for node in planned:
            _rewrite(model.graph, node, self.plan.weights)
        if planned:
            model.opset_imports.setdefault(MS_DOMAIN, 1)
        return ir.passes.PassResult(model, modified=bool(planned))

    def ensures(self, model: ir.Model) -> None:
        for node in self._planned(model):
            raise ir.passes.PostconditionError(f"{node.name}: a planned LSTM is left")

    def _planned(self, model: ir.Model) -> list[ir.Node]:
        return [n for n in model.graph if n.op_type == "LSTM" and n.name in self.plan.nodes]


def lstm_weights(weight: np.ndarray, fmt: WeightFormat) -> tuple[np.ndarray, ...]:
    """An LSTM's W or R ([D, 4H, K]) as DynamicQuantizeLSTM reads it: [D, K, 4H] in `fmt`, with
    scales and zero points [D, 4H]."""
    parts = [
        quantize_weight(np.ascontiguousarray(w.T), 1, fmt, reduction=lambda b: b.T) for w in weight
    ]
    return tuple(np.stack(arrays) for arrays in zip(*parts))


def _kernel_attributes(lstm: ir.Node) -> list[ir.Attr]:
    """The LSTM's attributes but `layout`, which the kernel's schema lacks (ORT runs layout 0
    only, in FP32 too)."""
    return [a for a in lstm.attributes.values() if a.name != "layout"]


def _rewrite(graph: ir.Graph, node: ir.Node, fmt: WeightFormat) -> None:
    inputs = [*node.inputs, *[None] * (LSTM_INPUTS - len(node.inputs))]
    for index, role in ((1, "W"), (2, "R")):
        arrays = lstm_weights(inputs[index].const_value.numpy(), fmt)
        quantized, scale, zero_point = (
            add_initializer(graph, f"{node.name}_{role}_{part}", array)
            for part, array in zip(("quantized", "scale", "zero_point"), arrays)
        )
        inputs[index] = quantized
        inputs += [scale, zero_point]
    dynamic = ir.Node(
        MS_DOMAIN,
        OP_TYPE,
        inputs,
        attributes=_kernel_attributes(node),
        num_outputs=len(node.outputs),
    )
    graph.insert_after(node, dynamic)
    for old, new in zip(node.outputs, dynamic.outputs):
        name, old.name = old.name, None
        new.name, new.type, new.shape = name, old.type, old.shape
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    graph.remove(node, safe=True)
    dynamic.name = node.name
