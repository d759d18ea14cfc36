"""Atomic file output, and saving ONNX models of any size: past protobuf's 2 GB limit,
weights go to external data."""

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

import onnx


@contextmanager
def atomic_path(target: Path):
    """Yield a temporary path in the target's directory; on success it replaces `target`, with
    the permissions a plain write would leave (mkstemp's are owner-only)."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _plain_write_mode(target))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _plain_write_mode(target: Path) -> int:
    """An existing file keeps its mode; a new one gets 0o666 less the umask."""
    if target.exists():
        return stat.S_IMODE(target.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_text(target: Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


# Protobuf cannot serialize a message of 2 GiB or more; leave room for the graph itself.
PROTOBUF_LIMIT = 2**31 - 2**26


def is_large(model: onnx.ModelProto) -> bool:
    return model.ByteSize() > PROTOBUF_LIMIT


def save_model(model: onnx.ModelProto, target: Path) -> None:
    """Write `target` atomically; a large model's weights go to `target.name + '.data'` beside it.

    Both files are written under temporary names in the target's directory and renamed into
    place, the data file first, so a reader never sees a model whose data is incomplete.
    """
    target = Path(target)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as tmp:
        staged = Path(tmp) / target.name
        if is_large(model):
            data_name = f"{target.name}.data"
            detached = (
                onnx.ModelProto()
            )  # onnx.save would move the caller's weights out of its model
            detached.CopyFrom(model)
            onnx.save(
                detached,
                str(staged),
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=data_name,
            )
            os.replace(Path(tmp) / data_name, target.parent / data_name)
        else:
            onnx.save(model, str(staged))
        os.replace(staged, target)
