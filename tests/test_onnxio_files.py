"""Output files: models past protobuf's 2 GB limit (the limit lowered for the test), and the
permissions an atomic write leaves."""

import os

import numpy as np
import onnx
from graphs import images

from onnxio import files
from quantize import Recipe, RunOptions, quantize
from quantize.runtime import session


def test_large_models_go_through_external_data_everywhere(
    monkeypatch, conv_model, calib_npz, tmp_path
):
    small = onnx.load(str(conv_model))
    monkeypatch.setattr(files, "PROTOBUF_LIMIT", 10_000)  # every model here now counts as large
    result = quantize(
        conv_model, calib_npz, Recipe(kernel_timing=False), RunOptions(calib_samples=50)
    )
    out = tmp_path / "out" / "big.onnx"
    out.parent.mkdir()
    files.save_model(result.model, out)
    assert sorted(os.listdir(out.parent)) == ["big.onnx", "big.onnx.data"]
    biggest = max(result.model.graph.initializer, key=lambda t: t.ByteSize())
    assert (out.parent / "big.onnx.data").stat().st_size >= len(biggest.raw_data) > 0
    assert biggest.raw_data not in out.read_bytes()
    assert (
        result.model.graph.initializer[0].data_location == onnx.TensorProto.DEFAULT
    )  # the caller's model is untouched
    x = images(3, size=16)
    from_disk = session(out).run(None, {"x": x})[0]
    np.testing.assert_array_equal(from_disk, session(result.model).run(None, {"x": x})[0])
    fp32 = session(small).run(None, {"x": x})[0]
    assert np.abs(from_disk - fp32).max() < 0.1 * np.abs(fp32).max()


def test_an_atomic_write_leaves_the_permissions_a_plain_write_would(tmp_path):
    new, kept = tmp_path / "report.json", tmp_path / "kept.json"
    kept.write_text("old")
    kept.chmod(0o640)
    umask = os.umask(0o022)
    try:
        files.write_text(new, "{}")
        files.write_text(kept, "{}")
    finally:
        os.umask(umask)
    assert new.stat().st_mode & 0o777 == 0o644
    assert kept.stat().st_mode & 0o777 == 0o640 and kept.read_text() == "{}"
