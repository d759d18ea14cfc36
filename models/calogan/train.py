"""`python -m models.calogan train`: train the 3DGAN on simulated showers, resumably.

The published recipe (REFERENCE section 2): cells x 100, Ep / 100, cells below 1e-6 GeV
zeroed; generator input = Gaussian noise x Ep/100; discriminator heads real/fake (BCE, weight
2), Ep regression (MAPE, 0.1) and the cell sum (MAPE, 0.1); RMSprop. The generator is pushed
towards the sum the 3DGAN sampling-fraction fit expects for its Ep. The batch is 32, not the
published 128: on 2 cores more steps an hour teach the GAN more.

A full training takes many hours on 2 cores, so it runs under a time budget and resumes: the
weights and the step reached are saved in the cache every CHECKPOINT_MINUTES, at every epoch
end and when the budget runs out (the optimiser state is not: RMSprop re-adapts within a few
hundred steps). The batch order is a function of (seed, epoch), so a resumed run continues the
same sequence. Where the CPU has AVX512-BF16 the convolutions train in mixed bfloat16 (1.5x
here); the variables, the heads and the losses stay float32, and the saved weights load into
the float32 generator that is exported.

The training reached so far is committed in `checkpoint/` (4 MB), because it takes hours here
and a fresh cache would otherwise start from random weights; a cache that holds less training
of the same recipe starts from it.
"""

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from models.calogan import LATENT
from models.calogan.detector import sampling_fraction_fit
from models.calogan.showers import write_showers
from models.progress import ProgressLine
from onnxio import write_text
from physics_metrics.showerfile import open_showers
from quantize.cache import cache_dir
from quantize.target import host_isa

CELL_SCALE, ENERGY_SCALE, CELL_FLOOR_GEV = 100.0, 100.0, 1e-6
LOSS_WEIGHTS = (2.0, 0.1, 0.1)
CHECKPOINT_MINUTES = 10.0
ENERGY_RANGE_GEV = (10.0, 500.0)  # primary energies of the training showers
COMMITTED_CHECKPOINT = Path(__file__).parent / "checkpoint"
CHECKPOINT_FILES = ("generator.weights.h5", "discriminator.weights.h5", "state.json")


@dataclass(frozen=True)
class TrainRecipe:
    showers: int = 20000
    epochs: int = 30
    batch: int = 32
    learning_rate: float = 1e-3
    seed: int = 0

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.showers // self.batch)


def training_precision() -> str:
    return "mixed_bfloat16" if "avx512_bf16" in host_isa()["isa_flags"] else "float32"


def train(
    recipe: TrainRecipe = TrainRecipe(),
    minutes: float = float("inf"),
    out_dir: Path | None = None,
    log=print,
) -> Path:
    """Train (or resume) until `recipe.epochs` or the time budget (at least one step per call)."""
    import keras

    out = Path(out_dir) if out_dir else training_folder(recipe)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / "state.json"
    state = (
        json.loads(state_path.read_text())
        if state_path.exists()
        else {"step": 0, "recipe": asdict(recipe), "history": []}
    )
    total = recipe.epochs * recipe.steps_per_epoch
    if state["step"] >= total:
        log(
            f"already trained for {state['step']} steps ({state['step'] / recipe.steps_per_epoch:.1f} epochs): {out}"
        )
        return out
    showers, energies = _training_data(out, recipe)
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(training_precision())
    try:
        _train_steps(
            out, state, recipe, showers, energies, deadline=time.monotonic() + 60 * minutes, log=log
        )
    finally:
        keras.config.set_dtype_policy(previous_policy)
    return out


def training_folder(
    recipe: TrainRecipe | None = None, committed: Path = COMMITTED_CHECKPOINT
) -> Path:
    """The cache folder of the training, brought up to the committed checkpoint when that holds
    more steps of the same recipe (`recipe`, else the cached training's, else any)."""
    folder = cache_dir("calogan")
    if not (committed / "state.json").exists():
        return folder
    mine = json.loads((committed / "state.json").read_text())
    cached = (
        json.loads((folder / "state.json").read_text())
        if (folder / "state.json").exists()
        else None
    )
    wanted = asdict(recipe) if recipe else cached["recipe"] if cached else mine["recipe"]
    if wanted == mine["recipe"] and mine["step"] > (cached["step"] if cached else 0):
        for name in CHECKPOINT_FILES:  # the state last: it says the weights are there
            shutil.copyfile(committed / name, folder / name)
    return folder


def _train_steps(
    out: Path, state: dict, recipe: TrainRecipe, showers, energies, deadline: float, log
) -> None:
    import keras
    import tensorflow as tf

    from models.calogan.network import discriminator, generator

    keras.utils.set_random_seed(recipe.seed + state["step"])
    gen, disc = generator(), discriminator()
    if state["step"]:
        gen.load_weights(out / "generator.weights.h5")
        disc.load_weights(out / "discriminator.weights.h5")
    g_opt, d_opt = (
        keras.optimizers.RMSprop(recipe.learning_rate),
        keras.optimizers.RMSprop(recipe.learning_rate),
    )
    # Slots built before the first step: else tf.function traces it twice, once to create them.
    g_opt.build(gen.trainable_variables)
    d_opt.build(disc.trainable_variables)

    @tf.function
    def step(images, energy, expected_sum):
        n = tf.shape(images)[0]
        latent = tf.random.normal((n, LATENT)) * energy
        with tf.GradientTape() as tape:
            fake = gen(latent, training=True)
            real_out, fake_out = disc(images, training=True), disc(fake, training=True)
            d_loss = heads_loss(
                real_out, tf.ones((n, 1)), energy, tf.reduce_sum(images, axis=(1, 2, 3, 4))[:, None]
            ) + heads_loss(fake_out, tf.zeros((n, 1)), energy, expected_sum)
        d_opt.apply_gradients(
            zip(tape.gradient(d_loss, disc.trainable_variables), disc.trainable_variables)
        )
        with tf.GradientTape() as tape:
            g_loss = generator_loss(gen, disc, latent, energy, expected_sum)
        g_opt.apply_gradients(
            zip(tape.gradient(g_loss, gen.trainable_variables), gen.trainable_variables)
        )
        return d_loss, g_loss

    total, per_epoch = recipe.epochs * recipe.steps_per_epoch, recipe.steps_per_epoch
    losses, since = [], time.monotonic()
    progress = ProgressLine(total, log)
    while True:
        epoch, index = divmod(state["step"], per_epoch)
        order = np.random.default_rng([recipe.seed, epoch]).permutation(len(showers))
        idx = np.sort(np.array_split(order[: per_epoch * recipe.batch], per_epoch)[index])
        ep = energies[idx]
        losses.append(
            [
                float(v)
                for v in step(
                    showers[idx],
                    (ep / ENERGY_SCALE)[:, None].astype(np.float32),
                    (ep * sampling_fraction_fit(ep) * CELL_SCALE)[:, None].astype(np.float32),
                )
            ]
        )
        state["step"] += 1
        progress.update(state["step"], "d_loss {:.3f} g_loss {:.3f}".format(*losses[-1]))
        now = time.monotonic()
        finished = state["step"] >= total or now >= deadline
        if finished or index == per_epoch - 1 or now - since >= 60 * CHECKPOINT_MINUTES:
            _checkpoint(out, state, gen, disc, losses, now - since, per_epoch, log)
            losses, since = [], now
        if finished:
            return


def heads_loss(outputs, real, energy, cell_sum):
    """The published loss of the discriminator's three heads against their targets."""
    import keras

    bce, mape = keras.losses.binary_crossentropy, keras.losses.mean_absolute_percentage_error
    return (
        LOSS_WEIGHTS[0] * keras.ops.mean(bce(real, outputs[0]))
        + LOSS_WEIGHTS[1] * keras.ops.mean(mape(energy, outputs[1]))
        + LOSS_WEIGHTS[2] * keras.ops.mean(mape(cell_sum, outputs[2]))
    )


def generator_loss(gen, disc, latent, energy, expected_sum):
    """The generator's loss: its showers judged real by the discriminator, in the mode the
    discriminator is trained in (BatchNorm on the batch's own statistics, as the published
    Keras code's combined model ran). In inference mode, on moving statistics of real and fake
    batches, the discriminator had learnt nothing about fakes: D(fake) 0.75 there against 0.001
    in training mode, and a generator trained against that view for 1875 steps made showers
    nothing like the data (95 % of the simulation's energy lies in the central 5x5 cells,
    4-10 % of the generator's)."""
    import tensorflow as tf

    fake = gen(latent, training=True)
    return heads_loss(
        disc(fake, training=True), tf.ones((tf.shape(latent)[0], 1)), energy, expected_sum
    )


def _checkpoint(
    out: Path, state: dict, gen, disc, losses: list, seconds: float, per_epoch: int, log
) -> None:
    d_loss, g_loss = np.mean(losses, axis=0)
    state["history"].append(
        {
            "step": state["step"],
            "epoch": state["step"] / per_epoch,
            "seconds": seconds,
            "d_loss": float(d_loss),
            "g_loss": float(g_loss),
        }
    )
    gen.save_weights(out / "generator.weights.h5")
    disc.save_weights(out / "discriminator.weights.h5")
    write_text(out / "state.json", json.dumps(state, indent=2))
    log(
        f"step {state['step']} (epoch {state['step'] / per_epoch:.2f}): d_loss {d_loss:.3f} g_loss {g_loss:.3f} "
        f"({len(losses)} steps in {seconds:.0f} s)"
    )


def _training_data(out: Path, recipe: TrainRecipe) -> tuple[np.ndarray, np.ndarray]:
    """Simulated showers (cached), scaled as the 3DGAN trains on them: (N, 25, 25, 25, 1) x 100."""
    path = out / f"train_{recipe.showers}_seed{recipe.seed}.h5"
    if not path.exists():
        write_showers(path, recipe.showers, seed=recipe.seed, energy_range=ENERGY_RANGE_GEV)
    showers = open_showers(path)
    cells = showers.ecal[:]
    cells[cells < CELL_FLOOR_GEV] = 0
    return (cells * CELL_SCALE)[..., None].astype(np.float32), showers.energies
