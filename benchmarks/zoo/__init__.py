"""The model zoo: real trained models that ship inside PyPI packages, exported by the tools their
authors use, quantized with `quantize MODEL --calib DATA` and the CLI's defaults, and checked
with a task metric against FP32 and timed against FP32 and ONNX Runtime's own quantizers.

One module per model family (minilm, ppocr, yolo, layout); each gives `ZooModel`s (zoo_model.py).
`python -m benchmarks.zoo` runs them all and writes benchmarks/results/zoo_TARGET.{json,md};
tests/test_zoo.py runs each in a reduced form (few samples) in the suite.
"""
