"""Calibration data sources, read in batches so that a file larger than memory works.

The first axis of every array is the sample axis, except in whole feeds (a list of
`{input name: array}`, or an .npz of them written by `save_feeds`), each a batch of its own.
Each source knows its sample count up front and yields `{input name: array}` batches for any
[start, stop) window; every batch is checked against the model's inputs (dtype kind, rank,
static dimensions, NaN/Inf) and a problem is reported as a `InputError` naming the file.
"""

import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from onnxio import InputError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple  # None for a dynamic dimension; shape[0] is the batch axis
    dtype: np.dtype


@dataclass(frozen=True)
class ImagePreprocess:
    """How an image file becomes a model input: resize, scale, normalise, lay out."""

    size: tuple[int, int] | None = None  # (height, width); None: the model's static input size
    scale: float = 1 / 255
    mean: tuple = (0.0, 0.0, 0.0)
    std: tuple = (1.0, 1.0, 1.0)
    layout: str | None = (
        None  # NHWC | NCHW; None: the model input's channel axis (the one of size 1 or 3)
    )
    color: str = "RGB"

    @classmethod
    def from_recipe(cls, recipe: dict) -> "ImagePreprocess":
        size = recipe.get("size")
        return cls(
            size=(size, size) if isinstance(size, int) else (tuple(size) if size else None),
            scale=recipe.get("scale", 1 / 255),
            mean=tuple(recipe.get("mean", (0.0, 0.0, 0.0))),
            std=tuple(recipe.get("std", (1.0, 1.0, 1.0))),
            layout=recipe.get("layout"),
            color=recipe.get("color", "RGB"),
        )


@dataclass
class CalibrationSource:
    """A sized, batch-readable set of samples for the model's inputs."""

    path: Path
    inputs: list[InputSpec]
    num_samples: int
    read: callable = field(repr=False)  # (start, stop) -> {name: array}
    prebatched: bool = False  # each sample is a whole feed of any batch size (sequence models)

    def batches(self, start: int, stop: int, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        stop = min(stop, self.num_samples)
        step = 1 if self.prebatched else batch_size
        for first in range(start, stop, step):
            yield self._checked(self.read(first, min(first + step, stop)), first)

    def samples_in(self, batch: dict[str, np.ndarray]) -> int:
        return 1 if self.prebatched else len(next(iter(batch.values())))

    def _checked(self, batch: dict[str, np.ndarray], first: int) -> dict[str, np.ndarray]:
        out = {}
        for spec in self.inputs:
            array = np.asarray(batch[spec.name])
            out[spec.name] = _conform(self.path, spec, array, first)
        return out


def open_calibration(
    path, inputs: list[InputSpec], image_preprocess: ImagePreprocess | None = None
) -> CalibrationSource:
    """Open `path` (`.npy`, `.npz`, `.h5`/`.hdf5`, `file.h5:DATASET`, or an image directory),
    or take a list of ready feeds `{input name: array}` whose shapes may differ from feed to
    feed (decoder steps with a growing cache, sentences of different lengths)."""
    if isinstance(path, list):
        return _feeds(path, inputs)
    text = str(path)
    dataset = None
    if not Path(text).exists() and ":" in text:
        text, dataset = text.rsplit(":", 1)
    path = Path(text)
    if not path.exists():
        raise InputError(path, "calibration data not found")
    if path.is_dir():
        source = _image_dir(path, inputs, image_preprocess or ImagePreprocess())
    elif path.suffix == ".npy":
        source = _npy(path, inputs)
    elif path.suffix == ".npz":
        source = _npz(path, inputs)
    elif path.suffix in (".h5", ".hdf5"):
        source = _hdf5(path, inputs, dataset)
    else:
        raise InputError(
            path, "unknown calibration format: use .npy, .npz, .h5/.hdf5 or a directory of images"
        )
    if source.num_samples == 0:
        raise InputError(path, "the calibration set is empty (0 samples)")
    return source


def save_feeds(path, feeds: list[dict[str, np.ndarray]]) -> None:
    """Whole feeds in one .npz, a member INDEX/INPUT each: the file form of a list of feeds, for
    inputs that are not rows of one array (a scalar, a state whose batch axis is not the first,
    sequences of different lengths). `open_calibration` and `load_feeds` read it back."""
    np.savez(
        path,
        **{f"{i}/{name}": array for i, feed in enumerate(feeds) for name, array in feed.items()},
    )


def load_feeds(path) -> list[dict[str, np.ndarray]]:
    """The feeds `save_feeds` wrote, in memory."""
    with np.load(path, allow_pickle=False) as archive:
        feeds = _feed_members(archive.files)
        return [
            {name: archive[f"{index}/{name}"] for name in feeds[index]} for index in sorted(feeds)
        ]


def _feeds(feeds: list[dict[str, np.ndarray]], inputs: list[InputSpec]) -> CalibrationSource:
    where = Path("<calibration feeds>")
    if not feeds:
        raise InputError(where, "the calibration set is empty (0 feeds)")
    for i, feed in enumerate(feeds):
        _check_feed(where, i, feed.keys(), inputs)
    return CalibrationSource(
        where, inputs, len(feeds), lambda start, stop: feeds[start], prebatched=True
    )


def _npz_feeds(path: Path, members: list[str], inputs: list[InputSpec]) -> CalibrationSource:
    """An .npz of whole feeds (`save_feeds`), each member read when its feed is."""
    present = _feed_members(members)
    if sorted(present) != list(range(len(present))):
        raise InputError(path, f"feeds are not numbered 0 to {len(present) - 1} without a gap")
    for index, names in sorted(present.items()):
        _check_feed(path, index, names, inputs)
    archive = np.load(path, allow_pickle=False)

    def read(start: int, stop: int) -> dict[str, np.ndarray]:
        feed = {}
        for spec in inputs:
            member = f"{start}/{spec.name}"
            try:
                feed[spec.name] = archive[member]
            except (ValueError, OSError, zipfile.BadZipFile) as exc:
                raise InputError(
                    path, f"member {member} is not a numeric array ({_reason(exc)})"
                ) from None
        return feed

    return CalibrationSource(path, inputs, len(present), read, prebatched=True)


def _feed_members(members: list[str]) -> dict[int, list[str]]:
    """Member names INDEX/INPUT (.npy stripped) as each feed's input names."""
    feeds: dict[int, list[str]] = {}
    for member in members:
        index, name = member.split("/", 1)
        feeds.setdefault(int(index), []).append(name)
    return feeds


def _check_feed(where: Path, index: int, names, inputs: list[InputSpec]) -> None:
    missing = [s.name for s in inputs if s.name not in names]
    if missing:
        raise InputError(
            where, f"feed {index} has no array for model input(s) {', '.join(missing)}"
        )


def _single_input(path: Path, inputs: list[InputSpec], what: str) -> InputSpec:
    if len(inputs) != 1:
        names = ", ".join(s.name for s in inputs)
        raise InputError(
            path,
            f"{what} holds one array but the model has {len(inputs)} inputs ({names}); use .npz or HDF5 keyed by input name",
        )
    return inputs[0]


def _npy(path: Path, inputs: list[InputSpec]) -> CalibrationSource:
    spec = _single_input(path, inputs, "a .npy file")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(path, f"not a numpy array file ({_reason(exc)})") from None
    _check_rank(path, spec, array.shape, array.dtype)
    return CalibrationSource(path, inputs, array.shape[0], lambda a, b: {spec.name: array[a:b]})


def _npz(path: Path, inputs: list[InputSpec]) -> CalibrationSource:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(path, f"not a .npz archive ({_reason(exc)})") from None
    stored = [n.removesuffix(".npy") for n in archive.namelist() if n.endswith(".npy")]
    if stored and all(n.split("/", 1)[0].isdigit() and "/" in n for n in stored):
        return _npz_feeds(path, stored, inputs)
    members = {Path(n).stem: n for n in archive.namelist() if n.endswith(".npy")}
    missing = [s.name for s in inputs if s.name not in members]
    if missing:
        raise InputError(
            path,
            f"no array for model input(s) {', '.join(missing)}; keys present: {', '.join(sorted(members)) or 'none'}",
        )
    headers = {s.name: _npz_header(path, archive, members[s.name]) for s in inputs}
    for spec in inputs:
        _check_rank(path, spec, headers[spec.name][0], headers[spec.name][1])
    count = _common_count(path, {n: h[0][0] for n, h in headers.items()})

    def read(start: int, stop: int) -> dict[str, np.ndarray]:
        return {
            name: _npz_rows(archive, members[name], *headers[name], start, stop) for name in headers
        }

    return CalibrationSource(path, inputs, count, read)


def _npz_header(path: Path, archive: zipfile.ZipFile, member: str):
    with archive.open(member) as f:
        try:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
        except ValueError as exc:
            raise InputError(
                path, f"member {member} is not a numpy array ({_reason(exc)})"
            ) from None
        offset = f.tell()
    if dtype.hasobject:
        raise InputError(path, f"member {member} holds Python objects, not a numeric array")
    if fortran and len(shape) > 1:
        raise InputError(
            path, f"member {member} is stored in Fortran order; save it C-contiguous to stream it"
        )
    if not shape:
        raise InputError(
            path,
            f"member {member} is a scalar, not an array of samples; a scalar or state input "
            "needs whole feeds (calibration.save_feeds: members INDEX/INPUT)",
        )
    return shape, dtype, offset


def _npz_rows(archive, member, shape, dtype, offset, start, stop) -> np.ndarray:
    """Rows [start, stop) of a (possibly compressed) .npy member, reading only up to `stop`."""
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    with archive.open(member) as f:
        f.seek(offset + start * row_bytes)
        raw = f.read((stop - start) * row_bytes)
    return np.frombuffer(raw, dtype).reshape((stop - start, *shape[1:]))


def _hdf5(path: Path, inputs: list[InputSpec], dataset: str | None) -> CalibrationSource:
    import h5py

    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise InputError(path, f"not a readable HDF5 file ({_reason(exc)})") from None
    if dataset is not None:
        names = {_single_input(path, inputs, f"'{path}:{dataset}'").name: dataset}
    else:
        names = {s.name: s.name for s in inputs}
    datasets = {}
    for input_name, key in names.items():
        node = handle.get(key)
        if not isinstance(node, h5py.Dataset):
            present = ", ".join(k for k in handle.keys()) or "none"
            raise InputError(
                path,
                f"no dataset '{key}' for model input '{input_name}'; datasets present: {present}",
            )
        datasets[input_name] = node
    for spec in inputs:
        _check_rank(path, spec, datasets[spec.name].shape, datasets[spec.name].dtype)
    count = _common_count(path, {n: d.shape[0] for n, d in datasets.items()})
    return CalibrationSource(
        path, inputs, count, lambda a, b: {n: d[a:b] for n, d in datasets.items()}
    )


def _image_dir(path: Path, inputs: list[InputSpec], prep: ImagePreprocess) -> CalibrationSource:
    spec = _single_input(path, inputs, "an image directory")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if len(spec.shape) != 4:
        raise InputError(
            path, f"images need a 4-D model input; '{spec.name}' has shape {spec.shape}"
        )
    channel_axis = 1 if (prep.layout or _layout_of(path, spec)) == "NCHW" else 3
    spatial = [d for i, d in enumerate(spec.shape[1:], 1) if i != channel_axis]
    size = prep.size or (tuple(spatial) if None not in spatial else None)
    if size is None:
        raise InputError(
            path, f"model input '{spec.name}' has dynamic height/width; give --image-size"
        )
    channels = spec.shape[channel_axis] or (3 if prep.color == "RGB" else 1)

    def read(start: int, stop: int) -> dict[str, np.ndarray]:
        batch = np.stack([_load_image(f, size, channels, prep) for f in files[start:stop]])
        return {spec.name: batch.transpose(0, 3, 1, 2) if channel_axis == 1 else batch}

    return CalibrationSource(path, inputs, len(files), read)


def _layout_of(path: Path, spec: InputSpec) -> str:
    """NCHW or NHWC, read from which axis of the model input holds 1 or 3 channels."""
    channels_first, channels_last = (spec.shape[axis] in (1, 3) for axis in (1, 3))
    if channels_first != channels_last:
        return "NCHW" if channels_first else "NHWC"
    if spec.shape[1] is None and spec.shape[3] is None:
        return "NHWC"
    raise InputError(
        path,
        f"cannot tell the channel axis of model input '{spec.name}' {_shape_text(spec.shape)}; give --layout NCHW or NHWC",
    )


def _load_image(
    file: Path, size: tuple[int, int], channels: int, prep: ImagePreprocess
) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(file) as img:
            img = img.convert("RGB" if channels == 3 else "L").resize(
                (size[1], size[0]), Image.BILINEAR
            )
            pixels = np.asarray(img, np.float32).reshape(size[0], size[1], channels)
    except (UnidentifiedImageError, OSError) as exc:
        raise InputError(file, f"not a readable image ({_reason(exc)})") from None
    if prep.color == "BGR" and channels == 3:
        pixels = pixels[..., ::-1]
    mean, std = (
        np.asarray(prep.mean[:channels], np.float32),
        np.asarray(prep.std[:channels], np.float32),
    )
    return (pixels * np.float32(prep.scale) - mean) / std


def _check_rank(path: Path, spec: InputSpec, shape: tuple, dtype: np.dtype) -> None:
    if np.dtype(dtype).kind not in "biuf":
        raise InputError(path, f"input '{spec.name}': data of dtype {dtype} is not numeric")
    if len(shape) != len(spec.shape):
        raise InputError(
            path,
            f"input '{spec.name}': data has shape (samples, ...) = {tuple(shape)}, model expects rank {len(spec.shape)} {_shape_text(spec.shape)}",
        )


def _conform(path: Path, spec: InputSpec, array: np.ndarray, first: int) -> np.ndarray:
    if array.ndim != len(spec.shape):
        raise InputError(
            path,
            f"input '{spec.name}': data has shape {array.shape}, the model expects rank {len(spec.shape)} {_shape_text(spec.shape)}",
        )
    for axis, (want, got) in enumerate(zip(spec.shape[1:], array.shape[1:]), 1):
        if want is not None and want != got:
            raise InputError(
                path,
                f"input '{spec.name}': data shape {(None, *array.shape[1:])} does not match the model's {_shape_text(spec.shape)} on axis {axis}",
            )
    model_kind, data_kind = spec.dtype.kind, array.dtype.kind
    if (
        model_kind == "f"
        and data_kind not in "fiu"
        or model_kind in "iub"
        and data_kind not in "iub"
    ):
        raise InputError(
            path,
            f"input '{spec.name}': data dtype {array.dtype} does not match the model's {spec.dtype}",
        )
    if model_kind == "f" and data_kind == "f":
        bad = ~np.isfinite(array.reshape(len(array) if array.ndim else 1, -1)).all(axis=1)
        if bad.any():
            raise InputError(
                path,
                f"input '{spec.name}': sample {first + int(np.argmax(bad))} contains NaN or Inf",
            )
    return np.ascontiguousarray(array, dtype=spec.dtype)


def _common_count(path: Path, counts: dict[str, int]) -> int:
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{n}: {c}" for n, c in counts.items())
        raise InputError(path, f"inputs have different sample counts ({detail})")
    return next(iter(counts.values()))


def _shape_text(shape: tuple) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
