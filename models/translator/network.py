"""An encoder-decoder Transformer (Vaswani et al. 2017) in Keras 3, pre-LayerNorm.

Training runs the whole target at once (`call`). Inference is split in two graphs that
export to ONNX: `encode` (source -> the cross-attention keys/values of every decoder layer)
and `decode_step` (one target token + the self-attention cache -> next-token logits and the
cache grown by one position), so no step recomputes the prefix.

Caches are one (key, value) pair per decoder layer, each (batch, heads, positions, depth):
separate tensors, so a step reads and grows them without slicing or stacking copies.
"""

from dataclasses import dataclass

import keras
import numpy as np
from keras import layers, ops

NEG_INF = -1e9


@dataclass(frozen=True)
class TranslatorConfig:
    vocab: int = 8000
    d_model: int = 256
    heads: int = 4
    ffn: int = 1024
    encoder_layers: int = 3
    decoder_layers: int = 3
    max_len: int = 160
    dropout: float = 0.1

    @property
    def depth(self) -> int:
        return self.d_model // self.heads


SMALL = TranslatorConfig()
BASE = TranslatorConfig(
    vocab=32000, d_model=512, heads=8, ffn=2048, encoder_layers=6, decoder_layers=6
)


class Attention(layers.Layer):
    def __init__(self, config: TranslatorConfig, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.depth = config.heads, config.depth
        self.query, self.key, self.value, self.out = (
            layers.Dense(config.d_model, name=n) for n in ("query", "key", "value", "out")
        )
        self.dropout = layers.Dropout(config.dropout)

    def split_heads(self, x):
        """(batch, positions, d_model) -> (batch, heads, positions, depth)."""
        x = ops.reshape(x, (ops.shape(x)[0], -1, self.heads, self.depth))
        return ops.transpose(x, (0, 2, 1, 3))

    def keys_values(self, memory):
        return self.split_heads(self.key(memory)), self.split_heads(self.value(memory))

    def one_position(self, x):
        """(batch, d_model) of a single position -> (batch, heads, 1, depth): a plain reshape."""
        return ops.reshape(x, (-1, self.heads, 1, self.depth))

    def attend_one(self, x, keys, values, bias):
        """Attention for one query position, x (batch, d_model): a step graph without
        dynamic-shape arithmetic (ONNX Runtime pays per node, and a step has little compute)."""
        query = self.one_position(self.query(x) * self.depth**-0.5)
        weights = ops.softmax(ops.matmul(query, ops.transpose(keys, (0, 1, 3, 2))) + bias, axis=-1)
        return self.out(ops.reshape(ops.matmul(weights, values), (-1, self.heads * self.depth)))

    def call(self, x, keys, values, bias, training=False):
        query = self.split_heads(self.query(x) * self.depth**-0.5)
        weights = ops.softmax(ops.matmul(query, ops.transpose(keys, (0, 1, 3, 2))) + bias, axis=-1)
        context = ops.transpose(
            ops.matmul(self.dropout(weights, training=training), values), (0, 2, 1, 3)
        )
        return self.out(ops.reshape(context, (ops.shape(x)[0], -1, self.heads * self.depth)))


class FeedForward(layers.Layer):
    def __init__(self, config: TranslatorConfig, **kwargs):
        super().__init__(**kwargs)
        self.inner = layers.Dense(config.ffn, activation="relu", name="inner")
        self.outer = layers.Dense(config.d_model, name="outer")
        self.dropout = layers.Dropout(config.dropout)

    def call(self, x, training=False):
        return self.outer(self.dropout(self.inner(x), training=training))


class EncoderLayer(layers.Layer):
    def __init__(self, config: TranslatorConfig, **kwargs):
        super().__init__(**kwargs)
        self.attention, self.feed_forward = (
            Attention(config, name="attention"),
            FeedForward(config, name="ffn"),
        )
        self.norm1, self.norm2 = (
            layers.LayerNormalization(epsilon=1e-6),
            layers.LayerNormalization(epsilon=1e-6),
        )
        self.dropout = layers.Dropout(config.dropout)

    def call(self, x, bias, training=False):
        h = self.norm1(x)
        attention = self.attention(h, *self.attention.keys_values(h), bias, training=training)
        x = x + self.dropout(attention, training=training)
        return x + self.dropout(
            self.feed_forward(self.norm2(x), training=training), training=training
        )


class DecoderLayer(layers.Layer):
    def __init__(self, config: TranslatorConfig, **kwargs):
        super().__init__(**kwargs)
        self.self_attention, self.cross_attention = (
            Attention(config, name="self_attention"),
            Attention(config, name="cross_attention"),
        )
        self.feed_forward = FeedForward(config, name="ffn")
        self.norms = [layers.LayerNormalization(epsilon=1e-6, name=f"norm{i}") for i in range(3)]
        self.dropout = layers.Dropout(config.dropout)

    def call(self, x, cross_keys, cross_values, self_bias, cross_bias, training=False):
        h = self.norms[0](x)
        x = x + self.dropout(
            self.self_attention(
                h, *self.self_attention.keys_values(h), self_bias, training=training
            ),
            training=training,
        )
        x = x + self.dropout(
            self.cross_attention(
                self.norms[1](x), cross_keys, cross_values, cross_bias, training=training
            ),
            training=training,
        )
        return x + self.dropout(
            self.feed_forward(self.norms[2](x), training=training), training=training
        )

    def step(self, x, past_keys, past_values, cross_keys, cross_values, cross_bias):
        """One position, x (batch, d_model): attend to the cached positions plus this one;
        returns the grown cache."""
        attention = self.self_attention
        h = self.norms[0](x)
        keys = ops.concatenate([past_keys, attention.one_position(attention.key(h))], axis=2)
        values = ops.concatenate([past_values, attention.one_position(attention.value(h))], axis=2)
        x = x + attention.attend_one(h, keys, values, 0.0)
        x = x + self.cross_attention.attend_one(
            self.norms[1](x), cross_keys, cross_values, cross_bias
        )
        return x + self.feed_forward(self.norms[2](x)), keys, values


class Transformer(keras.Model):
    def __init__(self, config: TranslatorConfig = SMALL, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.embedding = layers.Embedding(config.vocab, config.d_model, name="embedding")
        self.positions = sinusoids(
            config.max_len, config.d_model
        )  # numpy: a constant in every traced graph
        self.encoder = [
            EncoderLayer(config, name=f"encoder_{i}") for i in range(config.encoder_layers)
        ]
        self.decoder = [
            DecoderLayer(config, name=f"decoder_{i}") for i in range(config.decoder_layers)
        ]
        self.encoder_norm = layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
        self.decoder_norm = layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
        self.logits = layers.Dense(config.vocab, name="logits")
        self.dropout = layers.Dropout(config.dropout)

    def embed(self, tokens, positions, training=False):
        x = self.embedding(tokens) * self.config.d_model**0.5 + ops.take(
            ops.convert_to_tensor(self.positions), positions, axis=0
        )
        return self.dropout(x, training=training)

    def call(self, inputs, training=False):
        """(source ids, target ids shifted right) -> logits over every target position."""
        source, target = inputs
        cross, source_bias = self.encode(source, training)
        length = ops.shape(target)[1]
        causal = ops.triu(ops.ones((length, length)), k=1) * NEG_INF
        x = self.embed(target, ops.arange(length), training)
        for i, layer in enumerate(self.decoder):
            x = layer(x, *cross[i], causal, source_bias, training=training)
        return self.logits(self.decoder_norm(x))

    def encode(self, source, training=False):
        """Source ids (0 = padding) -> (cross keys/values of every decoder layer, source bias)."""
        source_bias = ops.cast(ops.equal(source, 0), "float32")[:, None, None, :] * NEG_INF
        x = self.embed(source, ops.arange(ops.shape(source)[1]), training)
        for layer in self.encoder:
            x = layer(x, source_bias, training=training)
        memory = self.encoder_norm(x)
        return [layer.cross_attention.keys_values(memory) for layer in self.decoder], source_bias

    def decode_step(self, token, position, past, cross, source_bias):
        """token (batch, 1), position (batch, 1), per-layer (key, value) caches -> (logits
        (batch, vocab), the self-attention caches grown by one position)."""
        x = ops.reshape(self.embed(token, position), (-1, self.config.d_model))
        present = []
        for i, layer in enumerate(self.decoder):
            x, keys, values = layer.step(x, *past[i], *cross[i], source_bias)
            present.append((keys, values))
        return self.logits(self.decoder_norm(x)), present


def sinusoids(length: int, d_model: int) -> np.ndarray:
    position = np.arange(length)[:, None]
    rate = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)
    table = np.zeros((length, d_model), np.float32)
    table[:, 0::2], table[:, 1::2] = np.sin(position * rate), np.cos(position * rate)
    return table
