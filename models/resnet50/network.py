"""The standard ResNet-50 (v1.5: stride on the 3x3 conv) in Keras, for small RGB images."""

from functools import partial

import keras
from keras import layers


def bottleneck(
    x, filters: int, stride: int, project: bool, name: str, norm=layers.BatchNormalization
):
    shortcut = x
    if project:
        shortcut = layers.Conv2D(
            4 * filters, 1, strides=stride, use_bias=False, name=f"{name}_proj"
        )(x)
        shortcut = norm(name=f"{name}_proj_bn")(shortcut)
    x = layers.Conv2D(filters, 1, use_bias=False, name=f"{name}_1")(x)
    x = layers.ReLU(name=f"{name}_1_relu")(norm(name=f"{name}_1_bn")(x))
    x = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_2")(
        x
    )
    x = layers.ReLU(name=f"{name}_2_relu")(norm(name=f"{name}_2_bn")(x))
    x = layers.Conv2D(4 * filters, 1, use_bias=False, name=f"{name}_3")(x)
    x = norm(name=f"{name}_3_bn")(x)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([shortcut, x]))


def resnet50(
    num_classes: int = 10, stages=(3, 4, 6, 3), width: int = 64, bn_momentum: float = 0.99
) -> keras.Model:
    """ResNet-50 with the standard stem; `stages` and `width` (the first stage's filters) shrink
    it for tests. Any input size >= 32. A lower `bn_momentum` lets BatchNorm's moving statistics
    settle within a short training."""
    norm = partial(layers.BatchNormalization, momentum=bn_momentum)
    inputs = keras.Input((None, None, 3), name="image")
    x = layers.Conv2D(width, 7, strides=2, padding="same", use_bias=False, name="stem")(inputs)
    x = layers.ReLU(name="stem_relu")(norm(name="stem_bn")(x))
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
    for stage, blocks in enumerate(stages):
        filters = width * 2**stage
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = bottleneck(
                x, filters, stride, project=block == 0, name=f"s{stage + 1}b{block + 1}", norm=norm
            )
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name="resnet50")
