"""Task metrics the validation report can show FP32 vs INT8, one per reference model.

An evaluator is an object with `name`, `metric` (a label such as "top-1 %"),
`higher_is_better`, and `evaluate(model: onnx.ModelProto) -> float`. Reference models
register a factory here by name; the import happens only when one is asked for.
"""

import importlib

REGISTRY = {
    "resnet50": "models.resnet50.evaluate:Top1Evaluator",
    "translator-encoder": "models.translator.evaluate:encoder_bleu",
    "translator-decoder": "models.translator.evaluate:decoder_bleu",
    "calogan": "models.calogan.evaluate:PhysicsEvaluator",
}


def get_evaluator(name: str):
    if name not in REGISTRY:
        raise ValueError(f"unknown evaluator {name!r}; known: {', '.join(REGISTRY)}")
    module, factory = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), factory)()
