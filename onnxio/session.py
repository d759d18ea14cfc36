"""Plain ONNX Runtime CPU sessions, for a model in memory (of any size) or on disk.

Models quantize wrote for a CPU target are run through `quantize.runtime.session`, which adds
the target check on top of this.
"""

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onnxio.files import is_large, save_model

# ORT's CPU SkipLayerNormalization kernel is slower than the residual Add and LayerNormalization
# it fuses (benchmarks/results/ort_fusions_vnni.md), so every session leaves them unfused.
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]


def cpu_session(
    model: onnx.ModelProto | Path,
    threads: int = 0,
    optimized_path: Path | None = None,
    config: dict[str, str] | None = None,
    profile_prefix: Path | None = None,
) -> ort.InferenceSession:
    """A CPU session with all graph optimisations but DISABLED_OPTIMIZERS; `config` holds extra
    session config entries, `optimized_path` where ORT writes the graph it optimised,
    `profile_prefix` where ORT's profiler writes its record of every run (`end_profiling()`
    names the file)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name",
            f"{Path(optimized_path).name}.data",
        )
    if profile_prefix is not None:
        options.enable_profiling, options.profile_file_prefix = True, str(profile_prefix)
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    if isinstance(model, (str, Path)):
        return _session(str(model), options)
    if not is_large(model):
        return _session(model.SerializeToString(), options)
    with (
        tempfile.TemporaryDirectory() as tmp
    ):  # ORT reads external data while it builds the session
        path = Path(tmp) / "model.onnx"
        save_model(model, path)
        return _session(str(path), options)


def _session(model: str | bytes, options: ort.SessionOptions) -> ort.InferenceSession:
    return ort.InferenceSession(
        model,
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=DISABLED_OPTIMIZERS,
    )


def with_outputs(
    model: onnx.ModelProto, names: list[str], elem_type: int = onnx.TensorProto.FLOAT
) -> onnx.ModelProto:
    """A copy of `model` with the tensors `names`, all of `elem_type`, added to its outputs."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    exposed.graph.output.extend(
        onnx.helper.make_tensor_value_info(n, elem_type, None) for n in names if n not in present
    )
    return exposed


def computing_only(
    model: onnx.ModelProto, names: list[str], elem_type: int = onnx.TensorProto.FLOAT
) -> onnx.ModelProto:
    """A copy of `model` whose only outputs are the tensors `names`, all of `elem_type`, without
    the nodes and constants they do not need: ONNX Runtime runs every node of a graph whatever a
    run fetches. Its inputs stay (the same feeds run it). A graph with subgraphs (If, Loop,
    Scan), or a name no node makes, gets `names` added to its outputs instead (`with_outputs`)."""
    producers = {out: node for node in model.graph.node for out in node.output}
    has_subgraphs = any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for node in model.graph.node
        for a in node.attribute
    )
    if has_subgraphs or not all(n in producers for n in names):
        return with_outputs(model, names, elem_type)
    needed, pending = set(), list(names)
    while pending:
        node = producers.get(pending.pop())
        if node is not None and id(node) not in needed:
            needed.add(id(node))
            pending.extend(i for i in node.input if i)
    nodes = [n for n in model.graph.node if id(n) in needed]
    used = {i for n in nodes for i in n.input}
    pruned = onnx.ModelProto()
    pruned.CopyFrom(model)
    del pruned.graph.node[:], pruned.graph.output[:]
    pruned.graph.node.extend(nodes)
    pruned.graph.output.extend(
        onnx.helper.make_tensor_value_info(n, elem_type, None) for n in dict.fromkeys(names)
    )
    made = used | {o for n in nodes for o in n.output}
    for field in (pruned.graph.initializer, pruned.graph.value_info):
        kept = [t for t in field if t.name in made]
        del field[:]
        field.extend(kept)
    return pruned


FETCH_BUDGET = 1 << 30  # bytes of intermediate tensors one ORT run of an ObservingSession may hold
_PROBE_GROUP = 32  # tensors fetched per run while their sizes are still unknown


class ObservingSession:
    """A CPU session over `model` that fetches its intermediate tensors `names`, never more than
    `budget` bytes of them in one run.

    ORT keeps every fetched tensor of a run alive until the run returns, so fetching all the
    activations of a batch at once holds them all (a 640x640 text detector at batch 32 was
    killed for memory on a 24 GiB machine).
    A run is cut into sub-batches of rows where the batch dimension is free and `split_rows`
    allows, and the fetch list into groups that fit the budget at that many rows. Sizes per
    row are measured on the first feeds and grow with any larger feeds seen later.
    """

    def __init__(
        self, model: onnx.ModelProto, names: list[str], threads: int = 0, budget: int = FETCH_BUDGET
    ):
        self._session = cpu_session(with_outputs(model, names), threads)
        self._names = list(names)
        self._budget = budget
        self._row_bytes: dict[str, float] = {}
        self._free_batch = all(
            not i.shape or not isinstance(i.shape[0], int) for i in self._session.get_inputs()
        )

    def run(self, feeds: dict[str, np.ndarray], split_rows: bool = True) -> Iterator[dict]:
        """The tensors `names` for `feeds`, as dicts (name -> array) whose sizes fit the budget:
        a dict per group of names and sub-batch of rows."""
        rows = _common_rows(feeds)
        free = self._free_batch and rows is not None
        if not self._row_bytes:
            self._learn_sizes({k: v[:1] for k, v in feeds.items()} if free else feeds)
        whole = step = rows or 1
        if split_rows and free:
            step = max(1, min(rows, int(self._budget // max(sum(self._row_bytes.values()), 1))))
        for start in range(0, whole, step):
            part = (
                feeds if step == whole else {k: v[start : start + step] for k, v in feeds.items()}
            )
            for group in self._groups(step):
                yield self._fetch(group, part)

    def _learn_sizes(self, feeds: dict) -> None:
        """Each tensor's size per row, fetched a few at a time (on one row where the batch is free)."""
        for start in range(0, len(self._names), _PROBE_GROUP):
            self._fetch(self._names[start : start + _PROBE_GROUP], feeds)

    def _groups(self, rows: int) -> list[list[str]]:
        groups, current, size = [], [], 0.0
        for name in self._names:
            grows = self._row_bytes[name] * rows
            if current and size + grows > self._budget:
                groups.append(current)
                current, size = [], 0.0
            current.append(name)
            size += grows
        return [*groups, current] if current else groups

    def _fetch(self, group: list[str], feeds: dict) -> dict[str, np.ndarray]:
        rows = _common_rows(feeds) or 1
        fetched = dict(zip(group, self._session.run(group, feeds)))
        for name, value in fetched.items():
            self._row_bytes[name] = max(self._row_bytes.get(name, 0.0), value.nbytes / rows)
        return fetched


def _common_rows(feeds: dict[str, np.ndarray]) -> int | None:
    """The batch size every feed shares, or None (a scalar feed, or feeds that differ)."""
    sizes = {v.shape[0] if np.ndim(v) else None for v in feeds.values()}
    return sizes.pop() if len(sizes) == 1 else None
