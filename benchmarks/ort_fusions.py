"""`python -m benchmarks.ort_fusions`: four of ONNX Runtime's fusions on this CPU, the fused form
against what it replaces: three transformer fusions on the activations of a served MiniLM batch
(16 sentences of 31 tokens) and of a BERT-base one (768 wide), and the Q/DQ drop around a
MaxPool; and ONNX's own Attention op against ORT's. Writes ort_fusions_TARGET. Decides five
things:

- `onnxio.cpu_session` turns ORT's SkipLayerNormFusion off: its CPU SkipLayerNormalization
  kernel is slower than the residual Add and LayerNormalization it replaces.
- SmoothActivationsPass keeps the 0.5 that ends an Erf GELU: with it ORT fuses the bias Add and
  the GELU into one BiasGelu, and the smoothing scale costs one Mul after it; folded into the
  0.5, the five element-wise ops of the GELU run unfused.
- IntegerMatMulBiasPass writes a float-output INT8 MatMul as MatMulIntegerToFloat with its bias:
  ORT fuses the bias Add into that kernel only under dynamic quantization, and from a static
  Q/DQ MatMul it runs the Add (or a BiasGelu) after it.
- The pipeline keeps FP32 a MaxPool that ORT would run on uint8 in its NCHW kernel
  (`coverage.nchw_uint8_maxpools`): ORT drops the DequantizeLinear and QuantizeLinear around a
  MaxPool whose input and output share a scale, and away from its NHWC integer convolutions
  runs a generic uint8 kernel slower than the float MaxPool with the pair around it.
- OnnxAttentionPass writes the attention FuseAttentionPass fused as ONNX Attention (opset 23):
  with a padding bias ORT runs it faster than its contrib MultiHeadAttention.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.results import for_this_cpu, sized, write_results
from quantize.bench import compare_sessions
from quantize.passes.onnx_attention import ATTENTION_IR_VERSION, ATTENTION_OPSET
from quantize.target import host_isa

ROWS = (16, 31)  # sentences, tokens
THREADS = 2


def skip_layernorm(width: int, fused: bool) -> onnx.ModelProto:
    """x + skip -> LayerNorm: ORT's contrib SkipLayerNormalization, or the Add and ONNX
    LayerNormalization it fuses."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.uniform(0.5, 1.5, width).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.normal(0, 0.1, width).astype(np.float32), "beta"),
    ]
    nodes = (
        [
            helper.make_node(
                "SkipLayerNormalization",
                ["x", "skip", "gamma", "beta"],
                ["y"],
                domain="com.microsoft",
                epsilon=1e-12,
            )
        ]
        if fused
        else [
            helper.make_node("Add", ["x", "skip"], ["sum"]),
            helper.make_node(
                "LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-12
            ),
        ]
    )
    return _model(nodes, ["x", "skip"], width, inits)


def smoothed_gelu(width: int, scale_in_half: bool) -> onnx.ModelProto:
    """bias Add -> Erf GELU as exporters write it -> times 1/s per channel: 1/s folded into the
    GELU's 0.5, or a Mul of its own after a GELU that keeps 0.5."""
    inverse = np.random.default_rng(1).uniform(0.1, 1.0, width).astype(np.float32)
    half = 0.5 * inverse if scale_in_half else np.array(0.5, np.float32)
    inits = [
        numpy_helper.from_array(np.zeros(width, np.float32), "bias"),
        numpy_helper.from_array(inverse, "inverse"),
    ]
    nodes = [helper.make_node("Add", ["x", "bias"], ["h"])]
    gelu, gelu_inits = _erf_gelu("h", "y" if scale_in_half else "g", half)
    nodes += gelu
    if not scale_in_half:
        nodes.append(helper.make_node("Mul", ["g", "inverse"], ["y"]))
    return _model(nodes, ["x"], width, inits + gelu_inits)


def integer_dense(width: int, out_width: int, gelu: bool, bias_in_kernel: bool) -> onnx.ModelProto:
    """x quantized to uint8 -> times a per-column int8 weight -> plus a bias, in float
    [-> Erf GELU]: MatMulIntegerToFloat given the bias, or the Q/DQ MatMul and bias Add from
    which ORT makes its MatMulIntegerToFloat and a separate Add (BiasGelu before a GELU). The
    batch and token dimensions are named, as exporters write them: with sizes, ORT's
    MatMulAddFusion makes the Q/DQ form a float Gemm instead."""
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "x_zero_point"),
        numpy_helper.from_array(rng.integers(-127, 128, (width, out_width), np.int8), "w"),
        numpy_helper.from_array(rng.uniform(1e-3, 2e-3, out_width).astype(np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(out_width, np.int8), "w_zero_point"),
        numpy_helper.from_array(rng.normal(0, 0.1, out_width).astype(np.float32), "bias"),
    ]
    product = "h" if gelu else "y"
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero_point"], ["xq"])]
    if bias_in_kernel:
        quantized = ["xq", "w", "x_scale", "w_scale", "x_zero_point", "w_zero_point", "bias"]
        nodes.append(
            helper.make_node("MatMulIntegerToFloat", quantized, [product], domain="com.microsoft")
        )
    else:
        nodes += [
            helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero_point"], ["xd"]),
            helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero_point"], ["wd"], axis=1),
            helper.make_node("MatMul", ["xd", "wd"], ["p"]),
            helper.make_node("Add", ["p", "bias"], [product]),
        ]
    if gelu:
        gelu_nodes, gelu_inits = _erf_gelu("h", "y", np.array(0.5, np.float32))
        nodes, inits = nodes + gelu_nodes, inits + gelu_inits
    return _model(nodes, ["x"], width, inits, out_width, rows=("batch", "tokens"))


def dequantized_maxpool(
    shape: tuple[int, ...], kernel: int, stride: int, pad: int, same_scale: bool
) -> onnx.ModelProto:
    """uint8 x -> DequantizeLinear -> MaxPool -> QuantizeLinear -> uint8 y. With the output's
    scale the input's, ORT drops the pair and runs the MaxPool on uint8; with a scale of its own
    (as the pipeline calibrates an FP32 MaxPool's output), in float."""
    inits = [
        numpy_helper.from_array(np.float32(0.05), "x_scale"),
        numpy_helper.from_array(np.float32(0.05 if same_scale else 0.0501), "y_scale"),
        numpy_helper.from_array(np.uint8(128), "zero_point"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_scale", "zero_point"], ["x_float"]),
        helper.make_node(
            "MaxPool",
            ["x_float"],
            ["y_float"],
            kernel_shape=[kernel] * 2,
            strides=[stride] * 2,
            pads=[pad] * 4,
        ),
        helper.make_node("QuantizeLinear", ["y_float", "y_scale", "zero_point"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "maxpool",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def masked_attention(width: int, heads: int, onnx_attention: bool) -> onnx.ModelProto:
    """Self-attention of Q, K, V with an additive padding bias (batch, 1, query, key): ONNX
    Attention at opset 23, or ORT's contrib MultiHeadAttention that FuseAttentionPass writes."""
    bias = helper.make_tensor_value_info("bias", TensorProto.FLOAT, [ROWS[0], 1, ROWS[1], ROWS[1]])
    node = (
        helper.make_node(
            "Attention", ["q", "k", "v", "bias"], ["y"], q_num_heads=heads, kv_num_heads=heads
        )
        if onnx_attention
        else helper.make_node(
            "MultiHeadAttention",
            ["q", "k", "v", "", "", "bias"],
            ["y"],
            domain="com.microsoft",
            num_heads=heads,
        )
    )
    model = _model([node], ["q", "k", "v"], width, [])
    model.graph.input.append(bias)
    if onnx_attention:
        del model.opset_import[:]
        model.opset_import.append(helper.make_opsetid("", ATTENTION_OPSET))
        model.ir_version = ATTENTION_IR_VERSION
    return model


def _erf_gelu(x: str, y: str, half: np.ndarray) -> tuple[list, list]:
    """x * (erf(x / sqrt 2) + 1) * half, as exporters write the GELU (half = 0.5)."""
    inits = [
        numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(half, "half"),
    ]
    nodes = [
        helper.make_node("Div", [x, "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", [x, "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], [y]),
    ]
    return nodes, inits


def _model(nodes, inputs, width, inits, out_width=None, rows=ROWS) -> onnx.ModelProto:
    """`rows`: the leading dimensions as the model declares them, sizes or names."""
    graph = helper.make_graph(
        nodes,
        "fusion",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [*rows, width]) for n in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*rows, out_width or width])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def cases() -> list[tuple[str, dict[str, onnx.ModelProto], dict[str, np.ndarray]]]:
    """(case, {form: model}, feeds); the form the project chooses first."""
    rng = np.random.default_rng(2)

    def tokens(width, *names):
        return {n: rng.normal(size=(*ROWS, width)).astype(np.float32) for n in names}

    return [
        *[
            (
                f"residual Add + LayerNorm ({width} wide)",
                {
                    "Add, LayerNormalization": skip_layernorm(width, fused=False),
                    "SkipLayerNormalization (ORT's fusion)": skip_layernorm(width, fused=True),
                },
                tokens(width, "x", "skip"),
            )
            for width in (384, 768)
        ],
        *[
            (
                f"bias + GELU + smoothing ({width} wide)",
                {
                    "0.5 kept: BiasGelu, then the scaling Mul": smoothed_gelu(width, False),
                    "1/s in the 0.5: GELU unfused": smoothed_gelu(width, True),
                },
                tokens(width, "x"),
            )
            for width in (1536, 3072)
        ],
        *[
            (
                f"INT8 dense {width} -> {out_width}, bias{', GELU' if gelu else ''}",
                {
                    "MatMulIntegerToFloat with the bias": integer_dense(
                        width, out_width, gelu, bias_in_kernel=True
                    ),
                    "Q/DQ MatMul, bias Add (ORT's fusions)": integer_dense(
                        width, out_width, gelu, bias_in_kernel=False
                    ),
                },
                tokens(width, "x"),
            )
            for width, out_width, gelu in ((384, 384, False), (384, 1536, True))
        ],
        *[
            (
                f"self-attention with a padding bias ({width} wide, {heads} heads)",
                {
                    "ONNX Attention (opset 23)": masked_attention(width, heads, True),
                    "MultiHeadAttention (ORT's contrib op)": masked_attention(width, heads, False),
                },
                {**tokens(width, "q", "k", "v"), "bias": _padding_bias()},
            )
            for width, heads in ((384, 12), (768, 12))
        ],
        *[
            (
                f"MaxPool {kernel}x{kernel}/{stride} of uint8 {' x '.join(map(str, shape))} ({where})",
                {
                    "DequantizeLinear, float MaxPool, QuantizeLinear": dequantized_maxpool(
                        shape, kernel, stride, pad, same_scale=False
                    ),
                    "uint8 MaxPool (ORT drops the Q/DQ pair)": dequantized_maxpool(
                        shape, kernel, stride, pad, same_scale=True
                    ),
                },
                {"x": rng.integers(0, 256, shape, dtype=np.uint8)},
            )
            for shape, kernel, stride, pad, where in (
                ((6, 200, 2, 96), 2, 2, 0, "the PP-OCR direction classifier's"),
                ((1, 64, 112, 112), 3, 2, 1, "a ResNet stem's"),
            )
        ],
    ]


def _padding_bias() -> np.ndarray:
    """0 over each sentence's tokens, the float32 minimum over its padding (lengths 31 down)."""
    lengths = np.linspace(ROWS[1], ROWS[1] // 3, ROWS[0]).astype(int)
    padded = np.arange(ROWS[1]) >= lengths[:, None]
    bias = np.where(padded, np.finfo(np.float32).min, 0).astype(np.float32)
    return np.broadcast_to(bias[:, None, None, :], (*ROWS[:1], 1, ROWS[1], ROWS[1])).copy()


def main() -> None:
    rows = []
    for case, forms, feeds in cases():
        speed = compare_sessions(forms, feeds, threads=THREADS, min_seconds=sized(3.0, 0.3))
        (chosen, a), (other, b) = ((form, speed[form]) for form in forms)
        rows.append(
            {
                "case": case,
                "chosen": chosen,
                "chosen_ms": a["latency_ms_p50"],
                "other": other,
                "other_ms": b["latency_ms_p50"],
            }
        )
    result = {"machine": host_isa(), "threads": THREADS, "batch": list(ROWS), "cases": rows}
    markdown = "\n".join(
        [
            "# ONNX Runtime fusions on this CPU: median ms, 2 threads (transformer cases: a batch"
            " of 16 x 31 tokens)",
            "",
            "| case | chosen form | ms | other form | ms | other / chosen |",
            "|---|---|---|---|---|---|",
            *[
                f"| {r['case']} | {r['chosen']} | {r['chosen_ms']:.3f} | {r['other']} "
                f"| {r['other_ms']:.3f} | {r['other_ms'] / r['chosen_ms']:.2f} |"
                for r in rows
            ],
        ]
    )
    write_results(for_this_cpu("ort_fusions"), result, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
