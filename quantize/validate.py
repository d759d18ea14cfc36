"""How much did INT8 lose? Signal-to-quantization-noise ratios against the FP32 model.

An output that a Concat writes is judged part by part, each input of the Concat apart: a
detector's output joins its boxes (in pixels) and its class scores (0 to 1), and measured as
one tensor, the boxes' signal hides the scores' noise. The whole's ratio lies between its
parts', so the worst part is never better than the whole: judging by parts is only stricter.
"""

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from onnxio import computing_only
from quantize.runtime import served_sessions, session

LAYER_SAMPLES = 4  # per-layer SQNR reads every activation at once: few samples, in groups
LAYER_GROUP = 32
OUTPUT_FLOOR_DB = 20.0  # below it, or any layer below LAYER_FLOOR_DB, fidelity is low
LAYER_FLOOR_DB = 0.0  # noise above signal
# Hugging Face's name for the input that marks real tokens (1) and padding (0)
PADDING_MASK = "attention_mask"


def sqnr_db(reference: np.ndarray, approximation: np.ndarray) -> float:
    noise = np.sum((reference.astype(np.float64) - approximation) ** 2)
    signal = np.sum(reference.astype(np.float64) ** 2)
    if noise == 0:
        return float("inf")
    return float(10 * np.log10(signal / noise)) if signal > 0 else float("-inf")


@dataclass(frozen=True)
class OutputPart:
    """Positions `start:stop` along `axis` of the output `output` (the whole of it when `axis`
    is None), named `label` where measures are reported."""

    output: str
    label: str
    axis: int | None = None
    start: int = 0
    stop: int = 0

    def of(self, array: np.ndarray) -> np.ndarray:
        if self.axis is None:
            return array
        return array[(slice(None),) * self.axis + (slice(self.start, self.stop),)]


@dataclass(frozen=True)
class Reference:
    """The FP32 model's outputs over some batches (output name -> one array per batch), and the
    parts the measures judge apart."""

    outputs: dict[str, list[np.ndarray]]
    parts: list[OutputPart]


def reference_outputs(model: onnx.ModelProto, batches: list[dict], threads: int = 0) -> Reference:
    """`model`'s outputs over `batches` to measure INT8 models against, computed once."""
    return Reference(model_outputs(model, batches, threads), output_parts(model))


def output_parts(model: onnx.ModelProto) -> list[OutputPart]:
    """Each output of `model` as the inputs of the Concat that writes it, labelled
    `output[input]`, where the graph records their sizes along its axis; else the whole output."""
    writers = {o: n for n in model.graph.node for o in n.output}
    typed = [*model.graph.value_info, *model.graph.input, *model.graph.output]
    dims = {v.name: list(v.type.tensor_type.shape.dim) for v in typed}
    parts = []
    for output in (o.name for o in model.graph.output):
        concat = writers.get(output)
        pieces = _concat_sizes(concat, dims) if concat is not None else None
        if pieces is None:
            parts.append(OutputPart(output, output))
            continue
        axis, sizes = pieces
        start = 0
        for name, size in sizes:
            parts.append(OutputPart(output, f"{output}[{name}]", axis, start, start + size))
            start += size
    return parts


def _concat_sizes(node: onnx.NodeProto, dims: dict) -> tuple[int, list[tuple[str, int]]] | None:
    """The axis of a Concat of two or more distinct inputs, and each input's size along it, where
    every size is known; None otherwise."""
    if node.op_type != "Concat" or len(node.input) < 2 or len(set(node.input)) < len(node.input):
        return None
    axis = next(a.i for a in node.attribute if a.name == "axis")
    sizes = []
    for name in node.input:
        shape = dims.get(name)
        if not shape:
            return None
        dim = shape[axis]
        if not dim.HasField("dim_value") or dim.dim_value <= 0:  # Paddle2ONNX writes -1
            return None
        sizes.append((name, dim.dim_value))
    return axis % len(shape), sizes


def output_sqnr(
    fp32: onnx.ModelProto, int8: onnx.ModelProto, batches: list[dict], threads: int = 0
) -> dict[str, float]:
    """SQNR of every model output (part) over `batches`, the INT8 model run with ORT's fused
    kernels."""
    return sqnr_against(reference_outputs(fp32, batches, threads), int8, batches, threads)


def model_outputs(
    model: onnx.ModelProto, batches: list[dict], threads: int = 0, runtime: str = "onnxruntime"
) -> dict:
    """Every output of `model` over `batches` as `runtime` serves them (`served_sessions`):
    output name -> one array per batch."""
    runners = served_sessions(model, batches, threads, runtime)
    names = [o.name for o in runners[0].get_outputs()]
    results = [runner.run(None, b) for runner, b in zip(runners, batches)]
    return {name: [r[i] for r in results] for i, name in enumerate(names)}


def sqnr_against(
    reference: Reference,
    int8: onnx.ModelProto,
    batches: list[dict],
    threads: int = 0,
    runtime: str = "onnxruntime",
) -> dict[str, float]:
    """SQNR of each output part of `int8`, run by `runtime`, over `batches` against the
    `reference` (FP32's, from `reference_outputs`, computed once where many INT8 models are
    compared). Positions a batch's padding mask marks as padding do not count (`real_tokens`)."""
    got = model_outputs(int8, batches, threads, runtime)
    # flat: feeds of a sequence model may differ in shape from batch to batch
    return {
        part.label: sqnr_db(
            np.concatenate(
                [
                    real_tokens(part.of(r), b)
                    for r, b in zip(reference.outputs[part.output], batches)
                ]
            ),
            np.concatenate([real_tokens(part.of(g), b) for g, b in zip(got[part.output], batches)]),
        )
        for part in reference.parts
    }


def cosine_against(
    reference: Reference,
    int8: onnx.ModelProto,
    batches: list[dict],
    threads: int = 0,
    runtime: str = "onnxruntime",
) -> dict[str, float]:
    """Mean over samples of the cosine between each output part of `int8`, run by `runtime`, and
    the `reference`'s, a sample's part (its real tokens, `real_tokens`) one vector."""
    got = model_outputs(int8, batches, threads, runtime)
    return {
        part.label: float(
            np.mean(
                [
                    _cosine(r, g)
                    for ref_batch, got_batch, b in zip(
                        reference.outputs[part.output], got[part.output], batches
                    )
                    for r, g in zip(
                        _sample_rows(part.of(ref_batch), b), _sample_rows(part.of(got_batch), b)
                    )
                ]
            )
        )
        for part in reference.parts
    }


def _cosine(reference: np.ndarray, approximation: np.ndarray) -> float:
    a, b = reference.astype(np.float64), approximation.astype(np.float64)
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    if norms == 0:
        return 1.0 if not a.any() and not b.any() else 0.0
    return float(a @ b / norms)


def _sample_rows(output: np.ndarray, batch: dict) -> list[np.ndarray]:
    """`output` as one flat vector per sample (its first axis), without padded positions
    (`real_tokens`)."""
    if output.ndim == 0:
        return [output.ravel()]
    mask = _padding_mask(output, batch)
    if mask is None:
        return [row.ravel() for row in output]
    return [row[m].ravel() for row, m in zip(output, mask)]


def real_tokens(output: np.ndarray, batch: dict) -> np.ndarray:
    """`output` flat, without the positions of padding tokens where the batch has a (batch,
    tokens) `PADDING_MASK` and the output starts with those two dimensions. A model's output at
    a padded position is not part of its contract (its users mask it away, as mean pooling
    does), and its error there can be any size: counted, it hid how MiniLM's tokens fared."""
    mask = _padding_mask(output, batch)
    return output.ravel() if mask is None else output[mask].ravel()


def _padding_mask(output: np.ndarray, batch: dict) -> np.ndarray | None:
    mask = batch.get(PADDING_MASK)
    if mask is None or mask.ndim != 2 or output.shape[:2] != mask.shape:
        return None
    return mask.astype(bool)


def layer_sqnr(
    fp32: onnx.ModelProto,
    int8: onnx.ModelProto,
    floors: dict[str, float],
    batch: dict,
    threads: int = 0,
) -> dict[str, float]:
    """SQNR of each quantized activation (its uint8 QuantizeLinear output, dequantized, vs the
    FP32 tensor). Read before any DequantizeLinear: an integer kernel may read the uint8 tensor
    directly (passes/integer_matmul_bias.py).

    `floors` maps tensors clipped below for their readers (an absorbed Relu, a SiLU's flat
    tail: quantize/plan.py) to where: their FP32 reference is clipped there too.
    """
    suffix = "_quantized"
    fp32_names = {o for n in fp32.graph.node for o in n.output}
    constants = {i.name: i for i in int8.graph.initializer}
    pairs = {
        n.output[0][: -len(suffix)]: n
        for n in int8.graph.node
        if n.op_type == "QuantizeLinear"
        and n.output[0].endswith(suffix)
        and n.output[0][: -len(suffix)] in fp32_names
        and len(n.input) == 3
        and constants[n.input[2]].data_type == onnx.TensorProto.UINT8
    }
    batch = first_samples(fp32, batch, LAYER_SAMPLES)
    items = list(pairs.items())
    result = {}
    for start in range(0, len(items), LAYER_GROUP):
        group = dict(items[start : start + LAYER_GROUP])
        quantized = [q.output[0] for q in group.values()]
        ref = run_with_outputs(fp32, list(group), batch, threads)
        got = session(computing_only(int8, quantized, onnx.TensorProto.UINT8), threads).run(
            quantized, batch
        )
        for (name, q), r, g in zip(group.items(), ref, got):
            scale, zero_point = (numpy_helper.to_array(constants[i]) for i in q.input[1:3])
            dequantized = (g.astype(np.float32) - zero_point.astype(np.float32)) * scale
            result[name] = sqnr_db(np.maximum(r, floors.get(name, -np.inf)), dequantized)
    return result


def first_samples(model: onnx.ModelProto, batch: dict, n: int) -> dict:
    """The first `n` samples of `batch`, unless an input's batch dimension is fixed."""
    fixed = any(
        i.type.tensor_type.shape.dim and i.type.tensor_type.shape.dim[0].dim_value > 0
        for i in model.graph.input
    )
    return batch if fixed else {name: array[:n] for name, array in batch.items()}


def run_with_outputs(
    model: onnx.ModelProto, names: list[str], batch: dict, threads: int
) -> list[np.ndarray]:
    """The tensors `names` of `model` on `batch`, computing only the nodes they need."""
    return computing_session(model, names, threads).run(names, batch)


def computing_session(model: onnx.ModelProto, names: list[str], threads: int):
    """A session of `model` whose outputs are the tensors `names`, computing only the nodes
    they need: for several batches, one session."""
    return session(computing_only(model, names), threads)
