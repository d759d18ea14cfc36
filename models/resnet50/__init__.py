"""ResNet-50 trained on Fashion-MNIST (Debian's `dataset-fashion-mnist`), checked by top-1."""
