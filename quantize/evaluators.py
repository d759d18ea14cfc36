"""Task metrics the validation report can show FP32 vs INT8.

An evaluator is an object with `name`, `metric` (a label such as "top-1 %"),
`higher_is_better`, and `evaluate(model: onnx.ModelProto) -> float`. A package offers one by
declaring a factory under the entry-point group `quantize.evaluators` in its pyproject.toml
(the reference models do so in this project's); it is imported only when asked for.
"""

from importlib.metadata import entry_points

GROUP = "quantize.evaluators"


def get_evaluator(name: str):
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    if name not in found:
        raise ValueError(
            f"unknown evaluator {name!r}; known: {', '.join(sorted(found)) or 'none installed'}"
        )
    return found[name].load()()
