"""Adding constant tensors to a graph."""

import numpy as np
import onnx_ir as ir


def add_initializer(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    value = ir.Value(name=name, const_value=ir.tensor(np.asarray(array), name=name))
    value.shape, value.type = value.const_value.shape, ir.TensorType(value.const_value.dtype)
    graph.register_initializer(value)
    return value
