"""Reference models that prove the toolkit on real work."""

import os

# TensorFlow turns its oneDNN kernels on by default only on CPUs with AVX512-VNNI or newer; on an
# AVX2 CPU its default (Eigen) kernels trained the demo ResNet-50 several times slower. TensorFlow
# reads this when it is imported, so it is set before any model imports it; a user's setting wins.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
