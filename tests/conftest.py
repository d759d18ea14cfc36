"""Fixtures: the shared models of graphs.py written to files."""

import numpy as np
import onnx
import pytest
from graphs import conv_net, images

import models  # noqa: F401  (sets TensorFlow's kernel choice before a test loads TensorFlow)


@pytest.fixture
def conv_model(tmp_path):
    path = tmp_path / "net.onnx"
    onnx.save(conv_net(channels=32), str(path))
    return path


@pytest.fixture
def calib_npz(tmp_path):
    path = tmp_path / "calib.npz"
    np.savez(path, x=images(120))
    return path
