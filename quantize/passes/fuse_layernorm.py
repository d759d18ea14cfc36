"""Fuse a decomposed layer normalisation into one LayerNormalization (opset >= 17).

tf2onnx exports Keras' LayerNormalization as thirteen elementwise nodes:

    mean = ReduceMean(x)          (GlobalAveragePool on a rank-3 x)
    d = x - mean;  var = ReduceMean(d * d)
    scale = gamma / sqrt(var + eps)
    y = x * scale + (beta + (-mean) * scale)     (the beta Add is absent when beta is 0)

ONNX Runtime pays per node, and in a decoder step there is little compute to hide it behind;
one LayerNormalization kernel does the same in a single pass. It also keeps the sensitive
statistics in FP32 as one node the quantization policy has no rule for.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, replace_nodes

MIN_OPSET = 17


class FuseLayerNormPass(FusionPass):
    """Replaces the decomposed LayerNorm that tf2onnx writes by one LayerNormalization.

    Only at opset >= 17, over the last axis, with constant gamma, beta and epsilon."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if model.opset_imports.get("", 0) < MIN_OPSET:
            return ir.passes.PassResult(model, modified=False)
        return super().call(model)

    def match(self, mean: ir.Node):
        """The nodes of the pattern rooted at the mean, with eps, gamma and beta; or None."""
        x = mean.inputs[0] if mean.inputs else None
        if x is None or not _is_last_axis_mean(mean):
            return None
        users = _users(mean.outputs[0])
        sub, neg = users.get("Sub"), users.get("Neg")
        if sub is None or neg is None or sub.inputs[0] is not x:
            return None
        square = _only_user(sub.outputs[0], "Mul")
        if square is None or square.inputs[0] is not square.inputs[1]:
            return None
        variance = _only_user(square.outputs[0], mean.op_type)
        add_eps = variance and _only_user(variance.outputs[0], "Add")
        sqrt = add_eps and _only_user(add_eps.outputs[0], "Sqrt")
        reciprocal = sqrt and _only_user(sqrt.outputs[0], "Reciprocal")
        scale = reciprocal and _only_user(reciprocal.outputs[0], "Mul")
        if scale is None or not _is_last_axis_mean(variance):
            return None
        eps, gamma = (
            _other_constant(add_eps, variance.outputs[0]),
            _other_constant(scale, reciprocal.outputs[0]),
        )
        scale_users = [u for u, _ in scale.outputs[0].uses()]
        x_scaled = next((u for u in scale_users if u.op_type == "Mul" and x in u.inputs), None)
        shift_scaled = next(
            (u for u in scale_users if u.op_type == "Mul" and neg.outputs[0] in u.inputs), None
        )
        if (
            eps is None
            or gamma is None
            or x_scaled is None
            or shift_scaled is None
            or len(scale_users) != 2
        ):
            return None
        add_beta = _only_user(shift_scaled.outputs[0], "Add")
        if add_beta is not None and set(add_beta.inputs) == {
            x_scaled.outputs[0],
            shift_scaled.outputs[0],
        }:
            add_beta, beta, final = (
                None,
                np.zeros_like(gamma),
                add_beta,
            )  # beta = 0: the exporter dropped its Add
        else:
            beta = add_beta and _other_constant(add_beta, shift_scaled.outputs[0])
            final = add_beta and _only_user(add_beta.outputs[0], "Add")
            if (
                beta is None
                or final is None
                or set(final.inputs) != {x_scaled.outputs[0], add_beta.outputs[0]}
            ):
                return None
        width = x.shape[-1]
        if (
            not isinstance(width, int)
            or gamma.size != width
            or beta.size != width
            or len(mean.outputs[0].uses()) != 2
        ):
            return None
        nodes = [
            n
            for n in (
                mean,
                neg,
                sub,
                square,
                variance,
                add_eps,
                sqrt,
                reciprocal,
                scale,
                x_scaled,
                shift_scaled,
                add_beta,
                final,
            )
            if n is not None
        ]
        if any(v.is_graph_output() for n in nodes[:-1] for v in n.outputs):
            return None
        return nodes, float(eps.reshape(-1)[0]), gamma.reshape(-1), beta.reshape(-1)

    def rewrite(self, graph: ir.Graph, mean: ir.Node, found) -> None:
        nodes, eps, gamma, beta = found
        name = mean.name.rsplit("/", 2)[0] if "/" in mean.name else mean.name
        gamma_value = add_initializer(graph, f"{name}_gamma", gamma.astype(np.float32))
        beta_value = add_initializer(graph, f"{name}_beta", beta.astype(np.float32))
        norm = ir.Node(
            "",
            "LayerNormalization",
            [mean.inputs[0], gamma_value, beta_value],
            attributes=[ir.AttrInt64("axis", -1), ir.AttrFloat32("epsilon", eps)],
            name=f"{name}_LayerNormalization",
        )
        replace_nodes(graph, nodes, norm)


def _is_last_axis_mean(node: ir.Node) -> bool:
    shape = node.inputs[0].shape
    if node.op_type == "GlobalAveragePool":
        return shape is not None and len(shape) == 3
    if node.op_type != "ReduceMean" or shape is None:
        return False
    keepdims = node.attributes["keepdims"].value if "keepdims" in node.attributes else 1
    if "axes" in node.attributes:
        axes = list(node.attributes["axes"].value)
    elif (
        len(node.inputs) > 1
        and node.inputs[1] is not None
        and node.inputs[1].const_value is not None
    ):
        axes = node.inputs[1].const_value.numpy().reshape(-1).tolist()
    else:
        return False
    return keepdims == 1 and len(axes) == 1 and axes[0] in (-1, len(shape) - 1)


def _users(value: ir.Value) -> dict[str, ir.Node]:
    return {user.op_type: user for user, _ in value.uses()}


def _only_user(value: ir.Value, op_type: str) -> ir.Node | None:
    users = list({id(u): u for u, _ in value.uses()}.values())  # x * x uses x twice
    return users[0] if len(users) == 1 and users[0].op_type == op_type else None


def _other_constant(node: ir.Node, value: ir.Value) -> np.ndarray | None:
    """The constant operand of a binary `node` whose other operand is `value`."""
    if len(node.inputs) != 2 or value not in node.inputs:
        return None
    other = node.inputs[1] if node.inputs[0] is value else node.inputs[0]
    return (
        other.const_value.numpy() if other is not None and other.const_value is not None else None
    )
