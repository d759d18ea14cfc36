"""A quantization recipe: what to quantize and how, as a frozen, versioned, serialisable value.

    recipe = Recipe(ranges=Entropy(), overrides=NodeOverrides(fp32=("Softmax",)))
    result = quantize("model.onnx", "calib.npz", recipe)
    Recipe.from_model(result.model)  # the recipe travels in the INT8 model's metadata

How to run (threads, batch size, sample counts) is `RunOptions`, kept apart: it changes how
long quantization takes, not the model it makes.
"""

import json
from dataclasses import asdict, dataclass, fields, replace

import onnx
import onnx_ir as ir

from calibration import Percentile, RangeMethod, method_from_dict, method_to_dict
from quantize.policy import TRANSFORMER_FP32_OPS
from quantize.runtime import RUNTIMES
from quantize.target import TARGETS, check_weights, default_weights, resolve

RECIPE_VERSION = 1
RECIPE_KEY = "quantize.recipe"


# The transformer preset's alpha with 8-bit weights, chosen on the translator's BLEU and
# MiniLM's embeddings. int7 weights have half the levels for what smoothing moves into them, and
# MiniLM's best alpha moves lower (benchmarks/results/smoothing_alpha_avx2.md): with the avx2
# formats (NARROW_WEIGHTS, fewer levels than int8's) `auto` takes the one of NARROW_ALPHAS whose
# model has the best held-out output SQNR.
AUTO_ALPHA = 0.8
NARROW_ALPHAS = (0.6, 0.7, 0.8)
NARROW_WEIGHTS = ("paired", "int7")


@dataclass(frozen=True)
class SmoothQuant:
    """Move activation outliers into the weights of the GEMMs that read them
    (quantize/passes/smooth_activations.py); `alpha` is the share moved, or `auto`: AUTO_ALPHA,
    or with NARROW_WEIGHTS the best of NARROW_ALPHAS on the held-out samples."""

    alpha: float | str = "auto"

    def __post_init__(self):
        if self.alpha != "auto" and not (
            isinstance(self.alpha, int | float) and 0 <= self.alpha <= 1
        ):
            raise ValueError(f"the SmoothQuant alpha must be auto or in [0, 1]; got {self.alpha!r}")

    def alphas(self, weights: str) -> tuple[float, ...]:
        """The alphas to try for a model with `weights`: one unless `auto` has a choice."""
        if self.alpha != "auto":
            return (self.alpha,)
        return NARROW_ALPHAS if weights in NARROW_WEIGHTS else (AUTO_ALPHA,)


@dataclass(frozen=True)
class NodeOverrides:
    """Exceptions to the policy for single nodes, by node name (`fp32` also takes op types;
    `fp32_outside_convs` takes op types only)."""

    fp32: tuple[str, ...] = ()  # kept in FP32
    # op types kept in FP32 except where only Convs, pools and such kept-INT8 ops read them
    # (policy.outside_convs)
    fp32_outside_convs: tuple[str, ...] = ()
    wide_outputs: tuple[
        str, ...
    ] = ()  # Convs read by FP32 ops only: 4 more bits near 0 (passes/widen_output.py)
    residual_inputs: tuple[
        str, ...
    ] = ()  # Convs read by FP32 ops only: 8 more bits of input (passes/residual_input.py)


@dataclass(frozen=True)
class Recipe:
    ranges: RangeMethod = Percentile()  # how an activation's histogram becomes its uint8 range
    smoothing: SmoothQuant | None = None
    target: str = (
        "auto"  # the CPU's INT8 path the model is made for: auto (this machine) | avx2 | vnni | amx
    )
    # auto | int8 | paired | int7 | uint8 (quantize/target.py); auto: int8 for vnni and amx, and for
    # avx2 paired (int7 in OpenVINO), or uint8 where that misses the accuracy goal and uint8 buys
    # it (quantize/weight_choice.py)
    weights: str = "auto"
    activation_matmuls: bool = True  # also MatMuls of two activations (attention scores, context)
    kernel_timing: bool = True  # on this machine's target, keep FP32 the Convs/GEMMs whose INT8 kernel measures slower
    bias_correction: bool = (
        True  # shift INT8 Convs' biases by their mean error, if the output SQNR gains
    )
    overrides: NodeOverrides = NodeOverrides()
    runtime: str = "onnxruntime"  # what the model will run in: the speed checks time it there

    def __post_init__(self):
        if self.target not in ("auto", *TARGETS):
            raise ValueError(
                f"unknown target {self.target!r}; choose from auto, {', '.join(TARGETS)}"
            )
        if self.runtime not in RUNTIMES:
            raise ValueError(f"unknown runtime {self.runtime!r}; choose from {', '.join(RUNTIMES)}")
        if self.weights != "auto":
            check_weights(
                self.weights, "vnni" if self.target == "auto" else self.target, self.runtime
            )

    def resolved(self) -> "Recipe":
        """The target and weight format named: `auto` is this machine's target and that
        target's first weight format; ValueError if the weights would saturate there."""
        target = resolve(self.target)
        weights = default_weights(target, self.runtime) if self.weights == "auto" else self.weights
        check_weights(weights, target, self.runtime)
        return replace(self, target=target, weights=weights)

    @classmethod
    def cnn(cls, **changes) -> "Recipe":
        """Every op ORT runs in INT8, percentile ranges: convolutional networks."""
        return cls(**changes)

    @classmethod
    def transformer(cls, **changes) -> "Recipe":
        """Chosen on the translator's BLEU and MiniLM's embeddings: percentile ranges, LayerNorm
        and GELU outliers smoothed into the weights, MatMul/Gemm with weights in INT8;
        attention's activation MatMuls, softmax, LayerNorm, residual Adds and the cache in FP32.
        A convolutional backbone before the attention (a text recogniser's) keeps the CNN
        recipe's INT8 shifts, gates and concats: those only Convs read."""
        return cls(
            **{
                "smoothing": SmoothQuant(),
                "activation_matmuls": False,
                "overrides": NodeOverrides(fp32_outside_convs=TRANSFORMER_FP32_OPS),
                **changes,
            }
        )

    @classmethod
    def generator(cls, model: ir.Model, **changes) -> "Recipe":
        """For a generator whose output spans decades (the 3DGAN's showers): the output
        convolution FP32 (uint8 cannot hold six decades of cell energy); the two convolutions
        before it with widened outputs, the last of them with its input at two levels;
        LeakyReLU and BatchNorm's Mul and Add in FP32, so that each block is requantized once,
        at the next convolution's input."""
        convs = [n.name for n in model.graph if n.op_type == "Conv"]
        if len(convs) < 3:
            raise ValueError(
                f"the generator recipe needs at least 3 Convs; the model has {len(convs)}"
            )
        overrides = NodeOverrides(
            fp32=(convs[-1], "LeakyRelu", "Mul", "Add"),
            wide_outputs=(convs[-3], convs[-2]),
            residual_inputs=(convs[-2],),
        )
        return cls(**{"overrides": overrides, **changes})

    def to_dict(self) -> dict:
        return {
            "version": RECIPE_VERSION,
            "ranges": method_to_dict(self.ranges),
            "smoothing": None if self.smoothing is None else asdict(self.smoothing),
            "target": self.target,
            "weights": self.weights,
            "activation_matmuls": self.activation_matmuls,
            "kernel_timing": self.kernel_timing,
            "bias_correction": self.bias_correction,
            "overrides": {k: list(v) for k, v in asdict(self.overrides).items()},
            "runtime": self.runtime,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Recipe":
        """The recipe `to_dict` wrote; ValueError for another version or an unknown field."""
        if data.get("version") != RECIPE_VERSION:
            raise ValueError(
                f"recipe version {data.get('version')!r}; this quantize reads version {RECIPE_VERSION}"
            )
        unknown = data.keys() - {"version"} - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown recipe fields {sorted(unknown)}")
        parts = {k: v for k, v in data.items() if k != "version"}
        if "ranges" in parts:
            parts["ranges"] = method_from_dict(parts["ranges"])
        if parts.get("smoothing") is not None:
            parts["smoothing"] = SmoothQuant(**parts["smoothing"])
        if "overrides" in parts:
            parts["overrides"] = NodeOverrides(
                **{k: tuple(v) for k, v in parts["overrides"].items()}
            )
        return cls(**parts)

    @classmethod
    def from_model(cls, model: onnx.ModelProto | ir.Model) -> "Recipe":
        """The recipe a quantized model (as saved, or in IR) was made with; ValueError if it
        carries none."""
        stamped = metadata(model).get(RECIPE_KEY)
        if stamped is None:
            raise ValueError("the model carries no quantize recipe: it was not made by quantize")
        return cls.from_dict(json.loads(stamped))


@dataclass(frozen=True)
class RunOptions:
    """How to run quantization: these change its time and memory, not the model it makes
    (except that the calibration set is the first `calib_samples` samples, and that with kernel
    timing on, the timings at `serve_batch` decide which nodes stay FP32, and with
    `speed_check`, whether the whole model does)."""

    calib_samples: int = 1000  # at most; fewer if the data has fewer
    held_out_samples: int = 64  # for the output SQNR; taken after the calibration samples
    batch_size: int = 32
    threads: int = 0  # ONNX Runtime intra-op threads; 0 = all cores
    # the batch the model will be served at: kernel timing, the speed check and the report's
    # throughput time INT8 against FP32 at it (None: the calibration batch)
    serve_batch: int | None = None
    # the CLI's: the whole model back in FP32 unless INT8 measures faster here, checked before
    # bias correction (which changes no speed) so that a model that goes back skips it
    speed_check: bool = False

    def __post_init__(self):
        if self.calib_samples < 1 or self.batch_size < 1:
            raise ValueError("calib_samples and batch_size must be positive")
        if self.serve_batch is not None and self.serve_batch < 1:
            raise ValueError(f"serve batch {self.serve_batch}: a batch holds 1 sample or more")


PRESETS = {"cnn": Recipe.cnn, "transformer": Recipe.transformer, "generator": Recipe.generator}
PRESETS_NEEDING_MODEL = {"generator"}


def preset_for(model: ir.Model) -> str:
    """The preset a graph calls for: `transformer` where it has attention (a Softmax over the
    product of two activations, ORT's MultiHeadAttention or ONNX Attention), a LayerNorm (fused
    or as ReduceMean ... Sqrt) or an embedding table; else `cnn` (a classifier's final MatMul
    and Softmax are not attention)."""
    nodes = list(model.graph)
    ops = {n.op_type for n in nodes}
    embedding = any(n.op_type == "Gather" and _is_float_table(n.inputs[0]) for n in nodes)
    layer_norm = "LayerNormalization" in ops or {"ReduceMean", "Sqrt"} <= ops
    attention = bool({"MultiHeadAttention", "Attention"} & ops) or any(
        _is_attention_softmax(n) for n in nodes
    )
    return "transformer" if embedding or layer_norm or attention else "cnn"


def metadata(model: onnx.ModelProto | ir.Model) -> dict[str, str]:
    """A model's metadata properties, whether it is held as saved or in IR."""
    if isinstance(model, ir.Model):
        return dict(model.metadata_props)
    return {p.key: p.value for p in model.metadata_props}


def _is_float_table(value: ir.Value) -> bool:
    table = value.const_value
    return table is not None and table.dtype == ir.DataType.FLOAT and len(table.shape) == 2


def _is_constant(value: ir.Value) -> bool:
    producer = value.producer()
    return value.const_value is not None or (
        producer is not None and producer.op_type == "Constant"
    )


def _is_attention_softmax(softmax: ir.Node) -> bool:
    """A Softmax whose input comes, through scaling or masking, from a MatMul of two activations."""
    if softmax.op_type != "Softmax":
        return False
    frontier, seen = [softmax.inputs[0]], set()
    while frontier:
        node = frontier.pop().producer()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.op_type == "MatMul":
            if not any(_is_constant(i) for i in node.inputs):
                return True
        elif node.op_type in ("Add", "Mul", "Div", "Sub", "Where", "Cast", "Reshape"):
            frontier.extend(i for i in node.inputs if i is not None and not _is_constant(i))
    return False


def preset(name: str, model: ir.Model, **changes) -> Recipe:
    """The recipe of preset `name` for `model`, with `changes` to its fields."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from auto, {', '.join(PRESETS)}")
    return (
        PRESETS[name](model, **changes)
        if name in PRESETS_NEEDING_MODEL
        else PRESETS[name](**changes)
    )
