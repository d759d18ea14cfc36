"""Train the translator on the Debian corpus under a time budget, resumably.

Recipe: joint sentencepiece vocabulary, Adam (0.9, 0.98) with 1000 warm-up steps and inverse
square-root decay, label smoothing 0.1, batches packed by the core's batcher under a token
budget. Weights and the step reached are saved in the cache every few minutes; a rerun
resumes (the Adam moments restart, the schedule does not).
"""

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from models.progress import ProgressLine
from models.translator.corpus import Pair, build_corpus, read_split
from models.translator.network import SMALL, Transformer, TranslatorConfig
from models.translator.tokenizer import BOS, EOS, load_tokenizer, train_tokenizer
from onnxio import write_text
from quantize.batcher import pack

SAVE_EVERY_SECONDS = 300


@dataclass(frozen=True)
class TrainRecipe:
    epochs: int = 8
    token_budget: int = 6000
    warmup: int = 1000
    label_smoothing: float = 0.1
    seed: int = 0


def prepare(out: Path, config: TranslatorConfig) -> list[Pair]:
    """The corpus's train split, and the tokenizer trained on it in `out` (both reused)."""
    train_pairs = read_split(build_corpus(), "train")
    if not (out / "spm.model").exists():
        train_tokenizer(
            [p.english for p in train_pairs] + [p.german for p in train_pairs],
            out / "spm",
            config.vocab,
        )
    return train_pairs


def encode_pairs(tokenizer, pairs, max_len: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Source ids + EOS, and target BOS + ids + EOS, both cut to `max_len`."""
    sources = [
        np.array(ids[: max_len - 1] + [EOS], np.int32)
        for ids in tokenizer.encode([p.english for p in pairs])
    ]
    targets = [
        np.array([BOS] + ids[: max_len - 2] + [EOS], np.int32)
        for ids in tokenizer.encode([p.german for p in pairs])
    ]
    return sources, targets


def padded(rows: list[np.ndarray]) -> np.ndarray:
    out = np.zeros((len(rows), max(len(r) for r in rows)), np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def train(
    out: Path,
    pairs: list[Pair],
    config: TranslatorConfig = SMALL,
    recipe: TrainRecipe = TrainRecipe(),
    minutes: float = float("inf"),
    log=print,
) -> Path:
    """Train on `pairs` with the tokenizer in `out` (or resume) until `recipe.epochs` or the
    budget; returns the weights file."""
    import keras
    import tensorflow as tf

    weights, state_path = out / "translator.weights.h5", out / "train_state.json"
    state = (
        json.loads(state_path.read_text())
        if state_path.exists()
        else {"step": 0, "epoch": 0, "config": asdict(config), "recipe": asdict(recipe)}
    )
    if state["epoch"] >= recipe.epochs:
        return weights
    tokenizer = load_tokenizer(out / "spm.model")
    sources, targets = encode_pairs(tokenizer, pairs, config.max_len)
    keras.utils.set_random_seed(recipe.seed + state["step"])  # the same model whatever ran before
    model = build_model(config, weights if state["step"] else None)
    d_model, warmup = config.d_model, recipe.warmup

    def rate(step):
        step = tf.cast(step + 1 + state["step"], tf.float32)
        return d_model**-0.5 * tf.minimum(step**-0.5, step * warmup**-1.5)

    optimizer = keras.optimizers.Adam(
        lambda: rate(optimizer.iterations), beta_1=0.9, beta_2=0.98, epsilon=1e-9
    )
    loss_fn = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=recipe.label_smoothing, reduction="none"
    )

    # Slots built before the first step: else tf.function traces it twice, once to create them.
    optimizer.build(model.trainable_variables)

    @tf.function(input_signature=[tf.TensorSpec((None, None), tf.int32)] * 2, reduce_retracing=True)
    def step(source, target):
        decoder_in, labels = target[:, :-1], target[:, 1:]
        mask = tf.cast(labels != 0, tf.float32)
        with tf.GradientTape() as tape:
            logits = model((source, decoder_in), training=True)
            loss = tf.reduce_sum(
                loss_fn(tf.one_hot(labels, config.vocab), logits) * mask
            ) / tf.reduce_sum(mask)
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
        return loss

    lengths = [max(len(s), len(t)) for s, t in zip(sources, targets)]
    rng = np.random.default_rng(recipe.seed + state["epoch"])
    deadline, last_save = time.monotonic() + 60 * minutes, time.monotonic()
    progress = ProgressLine(recipe.epochs, log, unit="epoch", decimals=2)
    while state["epoch"] < recipe.epochs and time.monotonic() < deadline:
        jittered = [n + rng.random() for n in lengths]  # a different packing every epoch
        batches = pack(jittered, recipe.token_budget, 512)
        losses = []
        for b in rng.permutation(len(batches))[state.get("batch_in_epoch", 0) :]:
            losses.append(
                float(
                    step(
                        padded([sources[i] for i in batches[b]]),
                        padded([targets[i] for i in batches[b]]),
                    )
                )
            )
            state["step"] += 1
            state["batch_in_epoch"] = state.get("batch_in_epoch", 0) + 1
            progress.update(
                state["epoch"] + state["batch_in_epoch"] / len(batches),
                f"loss {np.mean(losses[-100:]):.3f}",
            )
            if time.monotonic() - last_save > SAVE_EVERY_SECONDS or time.monotonic() > deadline:
                _save(model, weights, state, state_path, log, np.mean(losses[-100:]))
                last_save = time.monotonic()
                if time.monotonic() > deadline:
                    return weights
        state["epoch"], state["batch_in_epoch"] = state["epoch"] + 1, 0
        _save(model, weights, state, state_path, log, np.mean(losses[-100:]))
    return weights


def build_model(config: TranslatorConfig, weights: Path | None = None):
    model = Transformer(config)
    model((np.ones((1, 2), np.int32), np.ones((1, 2), np.int32)))
    if weights is not None:
        model.load_weights(weights)
    return model


def _save(model, weights: Path, state: dict, state_path: Path, log, loss: float) -> None:
    tmp = weights.with_name(".tmp." + weights.name)
    model.save_weights(tmp)
    tmp.replace(weights)
    state.setdefault("history", []).append(
        {"step": state["step"], "epoch": state["epoch"], "loss": float(loss), "time": time.time()}
    )
    write_text(state_path, json.dumps(state, indent=2))
    log(f"step {state['step']} epoch {state['epoch']}: loss {loss:.3f}")
