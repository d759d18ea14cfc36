"""Graph rewrites, each an onnx-ir pass: FP32 clean-up first, then lowering to Q/DQ.

cleanup(model)          shape inference, constant folding, written-out hard-swish -> HardSwish,
                        Mul/Div-by-constant chains into one Mul, per-channel scales and shifts
                        (BatchNorms too) into the Convs and ConvTransposes beside them,
                        decomposed LayerNorm -> LayerNormalization, MatMul+bias -> Gemm (also
                        across a Reshape), zero Pads into Convs, upsampling into Convs, Conv3D
                        -> 2D Conv, Reshapes before Transposes, Transpose merging and hoisting
                        through layout-blind ops, the main graph's Identities, dead nodes, and
                        for ONNX Runtime, written-out attention -> its MultiHeadAttention ->
                        ONNX Attention (opset 23) where the model can be raised to that opset
lower_to_qdq(model, p)  carry out a QuantPlan: absorb Relus, Divs by constants as Muls, fold
                        smoothing that no INT8 node reads back into the weights, insert Q/DQ
                        pairs, a HardSwish as QLinearAdd and QLinearMul, an LSTM as ONNX
                        Runtime's DynamicQuantizeLSTM (int8 weights), an Add of a constant before
                        Convs into their input's zero point, a residual Conv for chosen inputs,
                        widen chosen Conv outputs, and for ONNX Runtime, a nearest upsampling by
                        whole factors and a per-channel gate's broadcast as copies on NHWC data,
                        a float-output INT8 MatMul's bias Add into its integer kernel, and on
                        AMX large Convs' weights stored for ORT's GEMM path (AMX tiles); for
                        OpenVINO, Convs' and MatMuls' input zero points into their biases
"""

import onnx_ir as ir
from onnx_ir.passes import common

from quantize.passes.absorb_activation import AbsorbActivationPass
from quantize.passes.amx_conv_weights import AmxConvWeightsPass
from quantize.passes.bias_before_reshape import BiasBeforeReshapePass
from quantize.passes.broadcast_gate import BroadcastGatePass
from quantize.passes.div_to_mul import DivToMulPass
from quantize.passes.drop_identities import DropIdentitiesPass
from quantize.passes.drop_idle_scaling import DropIdleScalingPass
from quantize.passes.dynamic_lstm import DynamicLstmPass
from quantize.passes.fold_constants import FoldConstantsPass
from quantize.passes.fold_conv3d import FoldConv3DPass
from quantize.passes.fold_conv_input_affine import FoldConvInputAffinePass
from quantize.passes.fold_conv_output_affine import FoldConvOutputAffinePass
from quantize.passes.fold_pad import FoldPadIntoConvPass
from quantize.passes.fold_scaling import FoldScalingPass
from quantize.passes.fold_upsample import FoldUpsampleIntoConvPass
from quantize.passes.fuse_attention import FuseAttentionPass
from quantize.passes.fuse_hard_swish import FuseHardSwishPass
from quantize.passes.fuse_layernorm import FuseLayerNormPass
from quantize.passes.hard_swish_to_qlinear import HardSwishToQLinearPass
from quantize.passes.hoist_transpose import HoistTransposePass
from quantize.passes.insert_qdq import InsertQDQPass
from quantize.passes.integer_matmul_bias import IntegerMatMulBiasPass
from quantize.passes.matmul_to_gemm import MatMulToGemmPass
from quantize.passes.merge_transposes import MergeTransposesPass
from quantize.passes.onnx_attention import OnnxAttentionPass
from quantize.passes.residual_input import ResidualInputPass
from quantize.passes.shift_into_zero_point import ShiftIntoZeroPointPass
from quantize.passes.smooth_activations import SmoothActivationsPass
from quantize.passes.split_before_transpose import SplitBeforeTransposePass
from quantize.passes.upsample_as_copy import UpsampleAsCopyPass
from quantize.passes.widen_output import WidenOutputPass
from quantize.passes.zero_point_into_bias import ZeroPointIntoBiasPass
from quantize.plan import QuantPlan

__all__ = [
    "AbsorbActivationPass",
    "AmxConvWeightsPass",
    "BiasBeforeReshapePass",
    "BroadcastGatePass",
    "DivToMulPass",
    "DropIdentitiesPass",
    "DynamicLstmPass",
    "DropIdleScalingPass",
    "FoldConstantsPass",
    "FoldConvInputAffinePass",
    "FoldConvOutputAffinePass",
    "FoldConv3DPass",
    "FoldPadIntoConvPass",
    "FoldScalingPass",
    "FoldUpsampleIntoConvPass",
    "FuseAttentionPass",
    "FuseHardSwishPass",
    "FuseLayerNormPass",
    "HardSwishToQLinearPass",
    "HoistTransposePass",
    "MatMulToGemmPass",
    "InsertQDQPass",
    "IntegerMatMulBiasPass",
    "MergeTransposesPass",
    "ResidualInputPass",
    "ShiftIntoZeroPointPass",
    "SmoothActivationsPass",
    "SplitBeforeTransposePass",
    "UpsampleAsCopyPass",
    "WidenOutputPass",
    "ZeroPointIntoBiasPass",
    "cleanup",
    "lower_to_qdq",
]


def cleanup(model: ir.Model, runtime: str = "onnxruntime") -> ir.Model:
    """The FP32 model, simplified and fully named, for `runtime`; numerically the same function
    (but where FuseAttentionPass says)."""
    for_runtime = (
        [FuseAttentionPass(), common.RemoveUnusedNodesPass(), OnnxAttentionPass()]
        if runtime == "onnxruntime"
        else []
    )
    passes = ir.passes.PassManager(
        [
            common.NameFixPass(),
            common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
            common.RemoveInitializersFromInputsPass(),
            common.RemoveUnusedNodesPass(),
            FoldConstantsPass(),
            FuseHardSwishPass(),  # before FoldScalingPass folds its / 6 into the next scaling
            FoldScalingPass(),
            FoldConvOutputAffinePass(),
            FoldConvInputAffinePass(),
            common.ShapeInferencePass(),  # the Gemm and LayerNorm fusions need input ranks
            FuseLayerNormPass(),
            BiasBeforeReshapePass(),  # a Dense layer on a sequence (tf2onnx Tensordot)
            MatMulToGemmPass(),
            FoldPadIntoConvPass(),
            common.ShapeInferencePass(),  # the upsampling and Conv3D foldings need the shapes the Pad folding changed
            FoldUpsampleIntoConvPass(),  # a Conv reading an upsampled tensor reads it once per phase
            FoldConv3DPass(),  # ORT's INT8 3D conv is slower than FP32; its 2D QLinearConv is fast
            common.ShapeInferencePass(),  # moving Reshapes needs the shapes of the folded Convs' outputs
            SplitBeforeTransposePass(),
            MergeTransposesPass(),
            common.RemoveUnusedNodesPass(),  # a dead reader (the folded upsampling's) pins a value
            common.ShapeInferencePass(),  # hoisting a Transpose reads the shapes the moves changed
            HoistTransposePass(),
            DropIdentitiesPass(),  # not onnx-ir's: it fails in If bodies (drop_identities.py)
            common.RemoveUnusedNodesPass(),
            common.ShapeInferencePass(),
            *for_runtime,  # after the last shape inference: ONNX does not know ORT's contrib ops
            common.TopologicalSortPass(),
        ]
    )
    return passes(model).model


def lower_to_qdq(model: ir.Model, plan: QuantPlan, checked: bool = True) -> ir.Model:
    """`model` lowered to Q/DQ form by `plan`; `checked`: by the ONNX checker too (a fifth of
    a lowering's time; a one-node trial the fallback scores and throws away skips it)."""
    passes = ir.passes.PassManager(
        [
            AbsorbActivationPass(plan),
            DivToMulPass(plan),
            DropIdleScalingPass(plan),
            InsertQDQPass(plan),
            HardSwishToQLinearPass(plan),
            DynamicLstmPass(plan),
            ShiftIntoZeroPointPass(plan),
            ResidualInputPass(plan),
            WidenOutputPass(plan),
            *(
                [
                    UpsampleAsCopyPass(plan),
                    BroadcastGatePass(plan),
                    IntegerMatMulBiasPass(),
                    AmxConvWeightsPass(plan),
                ]
                if plan.runtime == "onnxruntime"
                else [ZeroPointIntoBiasPass()]
            ),
            common.RemoveUnusedNodesPass(),
            common.TopologicalSortPass(),
            *([common.CheckerPass()] if checked else []),
        ]
    )
    return passes(model).model
