"""What the zoo needs of a model: where its FP32 graph comes from, real inputs, a task metric."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Feed = dict[str, np.ndarray]


@dataclass(frozen=True)
class ZooModel:
    name: str
    exporter: str
    fidelity_target: str
    build: Callable[[], Path]  # the FP32 .onnx as its authors' exporter wrote it (cached)
    calibration: Callable[[int], Feed]  # n samples stacked per input, as a --calib .npz holds them
    evaluation: Callable[[int], list[Feed]]  # about n held-out samples, as feeds of served batches
    fidelity: Callable[[list[Feed], list[list], list[list]], dict]  # feeds, FP32 and INT8 outputs
    transformer: bool = False  # how ONNX Runtime's examples set quantize_static up for it
