"""Task metrics the validation report can show FP32 vs INT8.

An evaluator is an object with `name`, `metric` (a label such as "top-1 %"),
`higher_is_better`, and `evaluate(model: onnx.ModelProto) -> float`. A package offers one by
declaring a factory under the entry-point group `quantize.evaluators` in its pyproject.toml
(the reference models do so in this project's); it is imported only when asked for.

`OutputCosine` is built in: it needs no labels, only the held-out calibration samples, so that
`--max-drop` bounds a loss on any model.
"""

from importlib.metadata import entry_points

import onnx

from quantize.validate import cosine_against, reference_outputs

GROUP = "quantize.evaluators"


def get_evaluator(name: str):
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    if name not in found:
        raise ValueError(
            f"unknown evaluator {name!r}; known: {', '.join(sorted(found)) or 'none installed'}"
        )
    return found[name].load()()


class OutputCosine:
    """The worst output's (or output part's: validate.output_parts) mean cosine to FP32 over
    held-out samples, each sample's output (its real tokens) one vector, the INT8 model run by
    the runtime it is made for. FP32 scores 1, so a drop of 0.01 is a mean cosine of 0.99."""

    name, metric, higher_is_better = "output-cosine", "output cosine to FP32", True

    def __init__(
        self,
        fp32_model: onnx.ModelProto,
        batches: list[dict],
        threads: int = 0,
        runtime: str = "onnxruntime",
    ):
        self.batches, self.threads, self.runtime = batches, threads, runtime
        self.reference = reference_outputs(fp32_model, batches, threads)  # once, not per model

    def evaluate(self, model: onnx.ModelProto) -> float:
        cosine = cosine_against(self.reference, model, self.batches, self.threads, self.runtime)
        return min(cosine.values())
