"""The recipe as a value: frozen, versioned, read back exactly from what it wrote."""

import json

import onnx
import onnx_ir as ir
import pytest
from graphs import conv_net

from calibration import METHODS, Entropy, Percentile
from quantize import NodeOverrides, Recipe, SmoothQuant
from quantize.recipe import RECIPE_KEY, preset, preset_for


@pytest.mark.parametrize(
    "recipe",
    [
        Recipe(),
        Recipe.transformer(target="avx2"),
        Recipe(
            ranges=Entropy(),
            kernel_timing=False,
            overrides=NodeOverrides(fp32=("Softmax", "conv1"), wide_outputs=("conv2",)),
        ),
        Recipe(ranges=Percentile(99.9), smoothing=SmoothQuant(0.5), activation_matmuls=False),
        Recipe(runtime="openvino"),
    ],
)
def test_a_recipe_survives_json_and_the_model_metadata(recipe):
    assert Recipe.from_dict(json.loads(json.dumps(recipe.to_dict()))) == recipe
    model = conv_net()
    model.metadata_props.add(key=RECIPE_KEY, value=json.dumps(recipe.to_dict()))
    assert Recipe.from_model(model) == recipe


def test_every_range_method_round_trips():
    for cls in METHODS.values():
        assert Recipe.from_dict(Recipe(ranges=cls()).to_dict()).ranges == cls()


def test_a_recipe_of_another_version_or_with_unknown_fields_is_refused():
    data = Recipe().to_dict()
    with pytest.raises(ValueError, match="recipe version 2"):
        Recipe.from_dict({**data, "version": 2})
    with pytest.raises(ValueError, match=r"unknown recipe fields \['threads'\]"):
        Recipe.from_dict({**data, "threads": 2})
    with pytest.raises(ValueError, match="unknown calibration method 'kl'"):
        Recipe.from_dict({**data, "ranges": {"name": "kl"}})
    with pytest.raises(ValueError, match="carries no quantize recipe"):
        Recipe.from_model(conv_net())


def test_invalid_values_are_refused_where_they_are_made():
    with pytest.raises(ValueError, match="percentile"):
        Percentile(0)
    for alpha in (1.5, "best"):
        with pytest.raises(ValueError, match="alpha"):
            SmoothQuant(alpha)
    with pytest.raises(ValueError, match="unknown target"):
        Recipe(target="avx512")


def test_presets_are_constructors_and_the_generator_reads_its_model():
    assert preset("cnn", ir.from_proto(conv_net())) == Recipe()
    assert preset("transformer", ir.from_proto(conv_net())).smoothing == SmoothQuant("auto")
    model = conv_net()
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    with pytest.raises(ValueError, match="at least 3 Convs"):
        preset("generator", ir.from_proto(model))
    extra = onnx.helper.make_node("Conv", ["y", "w9"], ["z"], name="conv9")
    model.graph.node.append(extra)
    generator = preset("generator", ir.from_proto(model)).overrides
    assert (
        generator.fp32[0] == "conv9"
        and generator.wide_outputs == tuple(convs[-2:])
        and generator.residual_inputs == (convs[-1],)
    )
    assert preset_for(ir.from_proto(conv_net())) == "cnn"
