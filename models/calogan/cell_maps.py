"""The INT8 generator's output cell correction: a monotone map of every cell in place of the
final ReLU, fitted so that INT8's cells follow FP32's, and blended across an energy range.

Why maps: INT8's rounding noise, rectified by the final ReLU, adds energy where FP32 leaves
cells empty and widens the showers; its spread per cell is comparable to the 0.2 MeV hit
threshold, so it also decides which cells are hit. Halo cells (hit in HALO_HIT_PROBABILITY of
FP32's showers) are mapped quantile to quantile onto FP32's energies in that cell: their hits
and spectrum follow FP32. The core and the far field, where quantiles are unstable (the
shower's own fluctuations; a few hits in thousands), keep a bias (excess) or a gain (deficit,
at most MAX_GAIN), exact because ReLU(g x) = g ReLU(x) for g > 0.

Why two maps blended by the latent's norm: one map fitted on a whole range's latents is right
on the range's average and drifts across it (measured on the 188-307 GeV model: sampling
fraction +1.8 % at its bottom, -1.5 % at its top), because the noise is set by the range's
fixed scales while the signal grows with the energy. The generator sees the energy only as
the latent's norm (noise x Ep/100), so the maps are fitted on the lower and the upper half of
a range's latents by log |z| and blended linearly in log |z| shower by shower.
"""

from dataclasses import dataclass

import numpy as np
import onnx

from onnxio import InputError

HALO_HIT_PROBABILITY = (0.01, 0.5)
QUANTILE_LEVELS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.97)
# The halves' mean norms lie about a quarter of the range in from its ends (blend -0.5 and 1.5
# there); a latent beyond (an energy outside the range) is held at the limits, not extrapolated.
BLEND_LIMITS = (-1.0, 2.0)
# A far cell that INT8 rarely lights has a tiny mean, and the gain that brings it to FP32's mean
# is huge: the rare shower that lights it gets a cell far above any FP32 gives. Such a cell
# keeps part of its deficit instead.
MAX_GAIN = 2.0


@dataclass
class CellMaps:
    """Two maps of every cell, sum_k slopes[m, k] ReLU(x - knots[m, k]) for map m (K knots,
    (2, K, cells) each), fitted on latents of mean log |z| `log_norms[m]`; `cell_shape` is the
    pre-activations' shape in the graph (one shower, cells in the order of the columns)."""

    knots: np.ndarray
    slopes: np.ndarray
    log_norms: np.ndarray
    cell_shape: tuple[int, ...]

    def blend(self, z: np.ndarray) -> np.ndarray:
        """The weight of the upper map for each latent (N, 200): 0 at the lower anchor, 1 at the upper."""
        low, high = self.log_norms
        return np.clip((_log_norm(z) - low) / (high - low), *BLEND_LIMITS)

    def apply(self, cells: np.ndarray, z: np.ndarray) -> np.ndarray:
        """The corrected cells (N, cells) of pre-activations `cells` generated from latents `z`:
        what the graph computes, in numpy."""
        weight = self.blend(z)[:, None]
        low, high = (apply_cell_map(cells, k, s) for k, s in zip(self.knots, self.slopes))
        return np.maximum((1 - weight) * low + weight * high, 0)

    def replace_relu(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """A copy of `model` (its first input the latent) whose final ReLU computes `apply`."""
        relu = output_relu(model)
        blend_constants, blend = self._blend_steps(model.graph.input[0].name)
        map_constants, maps = self._map_steps(relu.input[0], relu.output[0])
        for step in blend + maps:
            step.name = relu.name if step.output[0] == relu.output[0] else step.output[0]
        corrected = onnx.ModelProto()
        corrected.CopyFrom(model)
        corrected.graph.initializer.extend(
            onnx.numpy_helper.from_array(v, name)
            for name, v in {**blend_constants, **map_constants}.items()
        )
        nodes = list(corrected.graph.node)
        index = next(i for i, n in enumerate(nodes) if n.name == relu.name)
        del corrected.graph.node[:]
        corrected.graph.node.extend(nodes[:index] + blend + maps + nodes[index + 1 :])
        return corrected

    def _blend_steps(self, latent: str):
        """Constants and nodes computing `blend` of each latent as weights [1 - w, w] of shape (2, N, 1)."""
        low, high = self.log_norms
        constants = {
            "cell_map_latent_axis": np.array([1], np.int64),
            "cell_map_norm_scale": np.array(
                0.5 / (high - low), np.float32
            ),  # log |z| = log(sum z^2) / 2
            "cell_map_norm_offset": np.array(low / (high - low), np.float32),
            "cell_map_blend_min": np.array(BLEND_LIMITS[0], np.float32),
            "cell_map_blend_max": np.array(BLEND_LIMITS[1], np.float32),
            "cell_map_blend_shape": np.array([1, -1, 1], np.int64),
            "cell_map_blend_sign": np.array([-1, 1], np.float32).reshape(2, 1, 1),
            "cell_map_blend_base": np.array([1, 0], np.float32).reshape(2, 1, 1),
        }
        make = onnx.helper.make_node
        return constants, [
            make("Mul", [latent, latent], ["cell_map_latent_squares"]),
            make(
                "ReduceSum",
                ["cell_map_latent_squares", "cell_map_latent_axis"],
                ["cell_map_latent_norm2"],
                keepdims=0,
            ),
            make("Log", ["cell_map_latent_norm2"], ["cell_map_log_norm2"]),
            make(
                "Mul", ["cell_map_log_norm2", "cell_map_norm_scale"], ["cell_map_scaled_log_norm"]
            ),
            make(
                "Sub",
                ["cell_map_scaled_log_norm", "cell_map_norm_offset"],
                ["cell_map_unclipped_blend"],
            ),
            make(
                "Clip",
                ["cell_map_unclipped_blend", "cell_map_blend_min", "cell_map_blend_max"],
                ["cell_map_blend"],
            ),
            make("Reshape", ["cell_map_blend", "cell_map_blend_shape"], ["cell_map_blend_column"]),
            make(
                "Mul", ["cell_map_blend_column", "cell_map_blend_sign"], ["cell_map_signed_blend"]
            ),
            make("Add", ["cell_map_signed_blend", "cell_map_blend_base"], ["cell_map_weights"]),
        ]

    def _map_steps(self, cells: str, output: str):
        """Constants and nodes computing both maps, weighted by the blend and summed, on the
        cells flattened to (N, cells): the first knot's term on every cell, the other knots'
        on the halo cells only (the rest have none) and added in place, then held at 0 where
        the blend extrapolates. Every knot on every cell cost the INT8 generator 15 % of its
        time (ad hoc, AVX2); the halo is about a quarter of the cells."""
        halo = np.flatnonzero(np.any(self.slopes[:, 1:] != 0, axis=(0, 1)))
        constants = {
            "cell_map_flat_shape": np.array([-1, self.knots.shape[2]], np.int64),
            "cell_map_cell_shape": np.array([-1, *self.cell_shape], np.int64),
            # (2, 1, cells) and (2, K - 1, 1, halo): the batch broadcasts at axis 1 and 2
            "cell_map_first_knots": self.knots[:, :1].astype(np.float32),
            "cell_map_first_slopes": self.slopes[:, :1].astype(np.float32),
            "cell_map_which_axis": np.array([0], np.int64),
        }
        halo_constants = {
            "cell_map_halo_index": halo,
            "cell_map_halo_knots": self.knots[:, 1:, None, halo].astype(np.float32),
            "cell_map_halo_slopes": self.slopes[:, 1:, None, halo].astype(np.float32),
            "cell_map_knot_axis": np.array([1], np.int64),
        }
        make = onnx.helper.make_node

        def terms(inputs: str, part: str) -> list:  # slope x ReLU(x - knot), both maps
            return [
                make("Sub", [inputs, f"cell_map_{part}_knots"], [f"cell_map_{part}_offsets"]),
                make("Relu", [f"cell_map_{part}_offsets"], [f"cell_map_{part}_ramps"]),
                make(
                    "Mul",
                    [f"cell_map_{part}_ramps", f"cell_map_{part}_slopes"],
                    [f"cell_map_{part}_terms"],
                ),
            ]

        def blended(values: str, part: str) -> list:  # (2, N, c) -> (N, c)
            return [
                make("Mul", [values, "cell_map_weights"], [f"cell_map_{part}_weighted"]),
                make(
                    "ReduceSum",
                    [f"cell_map_{part}_weighted", "cell_map_which_axis"],
                    [f"cell_map_{part}_blended"],
                    keepdims=0,
                ),
            ]

        steps = [
            make("Reshape", [cells, "cell_map_flat_shape"], ["cell_map_flat"]),
            *terms("cell_map_flat", "first"),
            *blended("cell_map_first_terms", "first"),
        ]
        mapped = "cell_map_first_blended"
        if halo.size:
            constants |= halo_constants
            steps += [
                make(
                    "Gather",
                    ["cell_map_flat", "cell_map_halo_index"],
                    ["cell_map_halo_cells"],
                    axis=1,
                ),
                *terms("cell_map_halo_cells", "halo"),
                make(
                    "ReduceSum",
                    ["cell_map_halo_terms", "cell_map_knot_axis"],
                    ["cell_map_halo_values"],
                    keepdims=0,
                ),
                *blended("cell_map_halo_values", "halo"),
                make("Shape", ["cell_map_halo_blended"], ["cell_map_halo_shape"]),
                make(
                    "Expand",
                    ["cell_map_halo_index", "cell_map_halo_shape"],
                    ["cell_map_halo_columns"],
                ),
                make(
                    "ScatterElements",
                    [mapped, "cell_map_halo_columns", "cell_map_halo_blended"],
                    ["cell_map_mapped"],
                    axis=1,
                    reduction="add",
                ),
            ]
            mapped = "cell_map_mapped"
        return constants, steps + [
            make("Reshape", [mapped, "cell_map_cell_shape"], ["cell_map_cells"]),
            make("Relu", ["cell_map_cells"], [output]),
        ]


def fit_cell_maps(
    pre: np.ndarray, target: np.ndarray, z: np.ndarray, hit_threshold: float, steps: int = 24
) -> CellMaps:
    """CellMaps for the final ReLU's inputs `pre` (N, *cell_shape) of latents `z` (N, 200), so that
    each half's map gives every cell FP32's mean energy (`target`, (N, cells), the same showers
    from FP32) on that half; `hit_threshold` in the cells' units tells the halo."""
    cells = pre.reshape(len(pre), -1)
    if cells.shape != target.shape:
        raise InputError(
            "generator",
            f"the final ReLU's input has {cells.shape[1]} cells per shower, the output {target.shape[1]}",
        )
    norms = _log_norm(z)
    upper = norms > np.median(norms)
    if not upper.any():
        raise InputError(
            "generator",
            "the latents of a range all have the same norm: no energy to blend the cell maps over",
        )
    halves = [
        _single_map(cells[rows], target[rows], hit_threshold, steps) for rows in (~upper, upper)
    ]
    return CellMaps(
        np.stack([h[0] for h in halves]),
        np.stack([h[1] for h in halves]),
        np.array([norms[~upper].mean(), norms[upper].mean()]),
        tuple(pre.shape[1:]),
    )


def apply_cell_map(cells: np.ndarray, knots: np.ndarray, slopes: np.ndarray) -> np.ndarray:
    """One map (knots, slopes of (K, cells)) on pre-activations (N, cells)."""
    return sum(s * np.maximum(cells - k, 0) for k, s in zip(knots, slopes))


def output_relu(model: onnx.ModelProto) -> onnx.NodeProto:
    """The ReLU that makes the generator's output, reached back from it through reshapes only
    (which keep the cells' order)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    node = producers.get(model.graph.output[0].name)
    while node is not None and node.op_type in ("Reshape", "Identity", "Flatten"):
        node = producers.get(node.input[0])
    if node is None or node.op_type != "Relu":
        raise InputError(
            "generator",
            "its output is not a ReLU followed by reshapes only: no cell correction possible",
        )
    return node


def _log_norm(z: np.ndarray) -> np.ndarray:
    return 0.5 * np.log(np.sum(np.square(z, dtype=np.float64), axis=1))


def _single_map(
    cells: np.ndarray, target: np.ndarray, hit_threshold: float, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per cell (column of `cells`, the pre-activations of N showers; `target`, FP32's energies of
    the same showers) the map sum_k slopes_k ReLU(x - knots_k), as (knots, slopes) of (K, cells)."""
    mean = target.mean(axis=0)
    gain, bias = _cell_corrections(cells, mean, steps)
    knots = np.zeros((len(QUANTILE_LEVELS), cells.shape[1]), np.float32)
    slopes = np.zeros_like(knots)
    knots[0], slopes[0] = -bias / gain, gain  # ReLU(g x + b) = g ReLU(x + b / g)
    hit = (target > hit_threshold).mean(axis=0)
    halo = (hit > HALO_HIT_PROBABILITY[0]) & (hit < HALO_HIT_PROBABILITY[1])
    halo_knots, halo_slopes = _quantile_maps(cells[:, halo], target[:, halo])
    mapped = apply_cell_map(cells[:, halo], halo_knots, halo_slopes).mean(axis=0)
    halo_slopes *= np.where(
        mapped > 0, mean[halo] / np.where(mapped > 0, mapped, 1), 1
    )  # the mean exactly
    knots[:, halo], slopes[:, halo] = halo_knots, halo_slopes
    return knots, slopes


def _cell_corrections(
    cells: np.ndarray, target: np.ndarray, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per cell (column of `cells`, the pre-activations of N showers) a gain or a bias so that
    mean(ReLU(gain x + bias)) = target: a gain where the mean is short, a bias where it is over."""
    mean = np.maximum(cells, 0).mean(axis=0)
    short = (mean < target) & (mean > 0)
    gain = np.where(short, target / np.where(short, mean, 1), 1)
    gain = np.minimum(gain, MAX_GAIN).astype(np.float32)
    over = mean > target
    low, high = (
        np.where(over, -cells.max(axis=0), 0),
        np.zeros(cells.shape[1]),
    )  # mean(ReLU(x + low)) = 0
    for _ in range(steps):
        middle = (low + high) / 2
        too_little = np.maximum(cells + middle, 0).mean(axis=0) < target
        low, high = np.where(too_little, middle, low), np.where(too_little, high, middle)
    return gain, np.where(over, (low + high) / 2, 0).astype(np.float32)


def _quantile_maps(cells: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column, the piecewise-linear map of `cells`' quantiles onto `target`'s: zero up to the
    quantile of target's empty fraction, then through the QUANTILE_LEVELS of the non-empty rest."""
    empty = (target <= 0).mean(axis=0)
    levels = empty + (1 - empty) * np.asarray(QUANTILE_LEVELS)[:, None]
    knots = _column_quantiles(np.sort(cells, axis=0), levels)
    values = _column_quantiles(np.sort(target, axis=0), levels)
    values[0] = 0
    knots = (
        np.maximum.accumulate(knots, axis=0) + np.arange(len(knots))[:, None] * 1e-6
    )  # strictly increasing
    segment = np.diff(values, axis=0) / np.diff(knots, axis=0)
    segment = np.concatenate([segment, segment[-1:]])  # the last segment extends upwards
    return knots, np.diff(segment, axis=0, prepend=0)


def _column_quantiles(ordered: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Linear-interpolated quantiles at `levels` (K, columns) of each column of `ordered` (sorted)."""
    position = levels * (len(ordered) - 1)
    below = np.floor(position).astype(int)
    above = np.minimum(below + 1, len(ordered) - 1)
    columns = np.arange(ordered.shape[1])
    weight = position - below
    return ordered[below, columns] * (1 - weight) + ordered[above, columns] * weight
