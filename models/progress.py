"""A progress line with an ETA for long runs (training, a benchmark's timing), every
`every_seconds` and at the end: Keras' verbose=2 prints once an epoch, and an epoch can take half
an hour on 2 cores. (Keras' `fit` shows it through `models.fit_schedule.CosineSchedule`; this module
does not import Keras.)"""

import time


class ProgressLine:
    """`training: step 120/9000 (1 %), loss 4.2, about 83 min left`. The pace counts from the
    first update, so a resumed run's ETA is its own and the first step's tracing is left out."""

    def __init__(
        self,
        total: float,
        log=print,
        every_seconds: float = 30.0,
        unit: str = "step",
        decimals: int = 0,
        task: str = "training",
    ):
        self.total, self.log, self.every = total, log, every_seconds
        self.unit, self.decimals, self.task = unit, decimals, task
        self.first: tuple[float, float] | None = None  # (done, time) at the first update
        self.last = 0.0

    def update(self, done: float, detail: str = "") -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = (done, now)
        elif now - self.last < self.every and done < self.total:
            return
        self.last = now
        pace = (done - self.first[0]) / max(now - self.first[1], 1e-9)
        left = (
            f"about {(self.total - done) / pace / 60:.0f} min left" if pace > 0 else "ETA unknown"
        )
        count = f"{done:.{self.decimals}f}/{self.total:.{self.decimals}f}"
        self.log(
            f"{self.task}: {self.unit} {count} ({100 * done / self.total:.0f} %)"
            f"{', ' + detail if detail else ''}, {left}"
        )
