"""Per-shower high-level features of REFERENCE section 4, vectorised over a chunk of showers."""

import numpy as np

HIT_THRESHOLD_GEV = 2e-4
CELL_FLOOR_GEV = 1e-6  # cells below are zero in the 3DGAN data
AXES = ("x", "y", "z")  # z is the layer (depth) axis


def projections(showers: np.ndarray) -> dict[str, np.ndarray]:
    """S_x, S_y, S_z: energy per slice along each axis, (N, 25) each."""
    return {
        "x": showers.sum(axis=(2, 3)),
        "y": showers.sum(axis=(1, 3)),
        "z": showers.sum(axis=(1, 2)),
    }


def shower_features(showers: np.ndarray, energies: np.ndarray) -> dict[str, np.ndarray]:
    """One value per shower for each feature; empty showers get moments of 0."""
    total = showers.sum(axis=(1, 2, 3), dtype=np.float64)
    safe_total = np.where(total > 0, total, 1.0)
    index = np.arange(showers.shape[1], dtype=np.float64)
    features = {"sampling_fraction": total / energies, "total_energy": total}
    for axis, profile in projections(showers).items():
        m1 = profile @ index / safe_total
        features[f"m1_{axis}"] = m1
        features[f"m2_{axis}"] = (
            np.sum(profile * (index[None, :] - m1[:, None]) ** 2, axis=1) / safe_total
        )
    hottest = np.unravel_index(showers.reshape(len(showers), -1).argmax(axis=1), showers.shape[1:])
    for axis, position in zip(AXES, hottest):
        features[f"hottest_{axis}"] = position.astype(np.float64)
    features["hits"] = np.count_nonzero(showers > HIT_THRESHOLD_GEV, axis=(1, 2, 3)).astype(
        np.float64
    )
    return features
