"""For ONNX Runtime on AMX: a Conv's int8 weights stored one step down with a zero point of -1,
so that ORT runs the Conv on AMX tiles. The weights dequantize to the same values.

ORT gives a QLinearConv whose int8 weights all have zero point 0 to MLAS's symmetric
convolution kernel, which multiplies with AVX512-VNNI even where the CPU has AMX. Any other
weight zero point sends it through im2col to MLAS's quantized GEMM, which runs on AMX tiles
wherever the CPU has them. With weights in [-127, 127], q - 1 with zero point -1 fits int8 and
is exact. A GEMM of few output channels or a short reduction fills few tiles and pays im2col
and a separate requantization, so only the Convs the plan names are stored this way (the shape
rule: `target.conv_on_amx_tiles`; the benchmark behind it: `benchmarks/amx_conv.py`).
"""

import numpy as np
import onnx_ir as ir

from quantize.plan import QuantPlan

ZERO_POINT = -1  # any non-zero weight zero point takes ORT's GEMM path; -1 keeps q - 1 in int8


def stored_for_gemm(q: np.ndarray, zero_point: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights `q` (zero point 0, within [-127, 127]) as the same values at
    zero point ZERO_POINT."""
    if q.dtype != np.int8 or np.any(zero_point != 0) or q.min(initial=0) < -127:
        raise ValueError("weights are not symmetric int8 within [-127, 127]")
    shifted = (q.astype(np.int16) + ZERO_POINT).astype(np.int8)
    return shifted, np.full(np.shape(zero_point), ZERO_POINT, np.int8)


class AmxConvWeightsPass(ir.passes.InPlacePass):
    """Stores the int8 weights of each Conv in `plan.amx_convs` at zero point ZERO_POINT.

    Precondition: each such Conv reads its weights through a DequantizeLinear of symmetric int8
    constants (InsertQDQPass's). Postcondition: none of them reads zero point 0."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        stored = 0
        for node in model.graph:
            if node.name not in self.plan.amx_convs:
                continue
            q, _, zero_point = _weight_dequantizer(node).inputs
            shifted, shifted_zero = stored_for_gemm(
                q.const_value.numpy(), zero_point.const_value.numpy()
            )
            q.const_value = ir.Tensor(shifted, name=q.name)
            zero_point.const_value = ir.Tensor(shifted_zero, name=zero_point.name)
            stored += 1
        return ir.passes.PassResult(model, modified=bool(stored))

    def requires(self, model: ir.Model) -> None:
        for node in model.graph:
            if node.name in self.plan.amx_convs:
                _weight_dequantizer(node)

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if node.name in self.plan.amx_convs:
                zero_point = _weight_dequantizer(node).inputs[2].const_value.numpy()
                if np.any(zero_point == 0):
                    raise ir.passes.PostconditionError(
                        f"{node.name}: its weights still take ORT's symmetric kernel"
                    )


def _weight_dequantizer(conv: ir.Node) -> ir.Node:
    dq = conv.inputs[1].producer()
    if (
        dq is None
        or dq.op_type != "DequantizeLinear"
        or len(dq.inputs) < 3
        or any(v is None or v.const_value is None for v in dq.inputs)
        or len(dq.inputs[0].uses()) != 1
    ):
        raise ir.passes.PreconditionError(
            f"{conv.name}: its weights are not dequantized int8 of its own"
        )
    return dq
