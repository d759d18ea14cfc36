"""A quantization recipe: a plain dataclass handed to `quantize_(model, calib, config)`."""

from dataclasses import asdict, dataclass

from calibration import METHODS


@dataclass(frozen=True)
class QuantConfig:
    method: str = "percentile"  # minmax | percentile | entropy | mse
    percentile: float = 99.999
    calib_samples: int = 1000  # at most; fewer if the data has fewer
    held_out_samples: int = 64  # for the output SQNR; taken after the calibration samples
    batch_size: int = 32
    exclude: tuple[str, ...] = ()  # node names or op types kept in FP32
    threads: int = 0  # ONNX Runtime intra-op threads; 0 = all cores

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown calibration method {self.method!r}; choose from {', '.join(METHODS)}")
        if not 0 < self.percentile <= 100:
            raise ValueError("percentile must be in (0, 100]")
        if self.calib_samples < 1 or self.batch_size < 1:
            raise ValueError("calib_samples and batch_size must be positive")

    def to_dict(self) -> dict:
        return asdict(self)
