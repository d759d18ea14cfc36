"""The energy-conditioned 3DGAN (REFERENCE section 2), in Keras 3, channels-last.

Generator: latent (200,) already multiplied by Ep/100 -> shower (25, 25, 25, 1), cells x 100.
Discriminator: shower -> (real/fake probability, Ep/100 estimate, sum of the cells).
The outputs and heads compute in float32 whatever the global policy, so that training in
mixed bfloat16 sums 15,625 cells and takes losses at full precision.
"""

import keras
from keras import layers

from models.calogan import LATENT


def generator() -> keras.Model:
    latent = keras.Input((LATENT,), name="latent")
    x = layers.Dense(7 * 7 * 8 * 8, name="dense")(latent)
    x = layers.Reshape((7, 7, 8, 8), name="reshape")(x)
    x = layers.Conv3D(64, (6, 6, 8), padding="same", kernel_initializer="he_uniform", name="conv1")(
        x
    )
    x = layers.BatchNormalization(name="bn1")(layers.LeakyReLU(0.3, name="lrelu1")(x))
    x = layers.UpSampling3D((2, 2, 2), name="up1")(x)
    x = layers.ZeroPadding3D((2, 2, 0), name="pad1")(x)
    x = layers.Conv3D(6, (6, 5, 8), kernel_initializer="he_uniform", name="conv2")(x)
    x = layers.BatchNormalization(name="bn2")(layers.LeakyReLU(0.3, name="lrelu2")(x))
    x = layers.UpSampling3D((2, 2, 3), name="up2")(x)
    x = layers.ZeroPadding3D((1, 0, 3), name="pad2")(x)
    x = layers.Conv3D(6, (3, 3, 8), kernel_initializer="he_uniform", name="conv3")(x)
    x = layers.LeakyReLU(0.3, name="lrelu3")(x)
    x = layers.Conv3D(
        1, (2, 2, 2), use_bias=False, kernel_initializer="glorot_normal", name="conv4"
    )(x)
    return keras.Model(latent, layers.ReLU(dtype="float32", name="shower")(x), name="generator")


@keras.saving.register_keras_serializable(package="quantize")
class CellSum(layers.Layer):
    """The third discriminator head: the total energy of the input shower."""

    def call(self, showers):
        return keras.ops.sum(showers, axis=(1, 2, 3, 4))[:, None]


def discriminator() -> keras.Model:
    shower = keras.Input((25, 25, 25, 1), name="shower")
    x = layers.Conv3D(32, 5, padding="same", name="conv1")(shower)
    x = layers.Dropout(0.2)(layers.LeakyReLU(0.3)(x))
    for i, pad in enumerate((2, 2, 1), start=2):
        x = layers.ZeroPadding3D(pad)(x)
        x = layers.Conv3D(8, 5, name=f"conv{i}")(x)
        x = layers.Dropout(0.2)(layers.BatchNormalization()(layers.LeakyReLU(0.3)(x)))
    x = layers.Flatten()(layers.AveragePooling3D(2)(x))
    real = layers.Dense(1, activation="sigmoid", dtype="float32", name="real")(x)
    energy = layers.Dense(1, dtype="float32", name="energy")(x)
    return keras.Model(
        shower,
        [real, energy, CellSum(dtype="float32", name="cell_sum")(shower)],
        name="discriminator",
    )
