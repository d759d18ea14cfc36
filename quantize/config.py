"""A quantization recipe: a plain dataclass handed to `quantize_(model, calib, config)`."""

from dataclasses import asdict, dataclass

import onnx

from calibration import METHODS
from quantize.policy import TRANSFORMER_FP32_OPS
from quantize.target import TARGETS


@dataclass(frozen=True)
class QuantConfig:
    method: str = "percentile"  # minmax | percentile | entropy | mse
    percentile: float = 99.999
    calib_samples: int = 1000  # at most; fewer if the data has fewer
    held_out_samples: int = 64  # for the output SQNR; taken after the calibration samples
    batch_size: int = 32
    exclude: tuple[str, ...] = ()  # node names or op types kept in FP32
    threads: int = 0  # ONNX Runtime intra-op threads; 0 = all cores
    activation_matmuls: bool = True  # also MatMuls of two activations (attention scores, context)
    smooth_alpha: float | None = None  # move activation outliers into GEMM weights (SmoothQuant)
    wide_outputs: tuple[str, ...] = ()  # Conv nodes whose output, read by FP32 ops only, gets 4 more bits near 0 (passes/widen_output.py)
    residual_inputs: tuple[str, ...] = ()  # Conv nodes, read by FP32 ops only, whose input gets 8 more bits (passes/residual_input.py)
    target: str = "auto"  # the CPU's INT8 path the model is made for: auto (this machine) | avx2 | vnni | amx (quantize/target.py)
    time_kernels: bool = True  # on this machine's target, keep FP32 the Convs/GEMMs whose INT8 kernel measures slower (quantize/kernel_timing.py)

    @classmethod
    def transformer(cls, **overrides) -> "QuantConfig":
        """The transformer recipe, chosen on the translator's BLEU and MiniLM's embeddings:
        percentile ranges, LayerNorm and GELU outliers smoothed into the weights, MatMul/Gemm with weights
        in INT8; attention's activation MatMuls, softmax, LayerNorm, residual Adds and the cache
        in FP32."""
        return cls(**{"method": "percentile", "exclude": TRANSFORMER_FP32_OPS, "activation_matmuls": False, "smooth_alpha": 0.8, **overrides})

    def __post_init__(self):
        if self.target not in ("auto", *TARGETS):
            raise ValueError(f"unknown target {self.target!r}; choose from auto, {', '.join(TARGETS)}")
        if self.method not in METHODS:
            raise ValueError(f"unknown calibration method {self.method!r}; choose from {', '.join(METHODS)}")
        if self.smooth_alpha is not None and not 0 <= self.smooth_alpha <= 1:
            raise ValueError("smooth_alpha must be in [0, 1]")
        if not 0 < self.percentile <= 100:
            raise ValueError("percentile must be in (0, 100]")
        if self.calib_samples < 1 or self.batch_size < 1:
            raise ValueError("calib_samples and batch_size must be positive")

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS = {"cnn": QuantConfig, "transformer": QuantConfig.transformer}


def preset_for(model: onnx.ModelProto) -> str:
    """The preset a graph calls for: `transformer` where it has attention (Softmax next to
    MatMuls), a LayerNorm (fused or as ReduceMean ... Sqrt) or an embedding table; else `cnn`."""
    ops = {n.op_type for n in model.graph.node}
    float_tables = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 2}
    embedding = any(n.op_type == "Gather" and n.input[0] in float_tables for n in model.graph.node)
    layer_norm = "LayerNormalization" in ops or {"ReduceMean", "Sqrt"} <= ops
    attention = {"Softmax", "MatMul"} <= ops
    return "transformer" if embedding or layer_norm or attention else "cnn"

