"""English-German sentence pairs from the German gettext catalogues Debian packages ship.

The package list is fixed, so `apt-get download` gives the same corpus on any Debian 12
machine (the versions fetched are recorded in `manifest.json`). Nothing is installed: the
`.mo` files are read straight out of each `.deb`'s data archive.

Splits are by package: dev and test messages come from packages the model never trained on,
and any pair whose English side also occurs in dev or test is removed from train.
"""

import json
import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polib

from onnxio import write_text
from quantize.cache import cache_dir

TRAIN_PACKAGES = (
    "coreutils",
    "tar",
    "grep",
    "sed",
    "findutils",
    "diffutils",
    "gettext",
    "wget",
    "util-linux-locales",
    "e2fsprogs-l10n",
    "dpkg",
    "apt",
    "debconf-i18n",
    "gnupg-l10n",
    "gcc-12-locales",
    "libc-l10n",
    "git",
    "libgtk-3-common",
    "libgtk-4-common",
    "libglib2.0-data",
    "nautilus-data",
    "gnome-control-center-data",
    "gnome-shell-common",
    "mutter-common",
    "thunar-data",
    "xfce4-panel",
    "xfce4-settings",
    "network-manager",
    "network-manager-gnome",
    "synaptic",
    "aptitude-common",
    "gnome-software-common",
    "evolution-common",
    "evolution-data-server-common",
    "totem-common",
    "rhythmbox-data",
    "gnucash-common",
    "vlc-l10n",
    "filezilla-common",
    "audacity-data",
    "pidgin-data",
    "hexchat-common",
    "orca",
    "gnome-builder",
)
DEV_PACKAGES = ("geany-common", "transmission-common")
TEST_PACKAGES = ("gedit-common", "evince-common", "gparted", "mousepad", "ristretto")
MAX_WORDS = 60

_CATALOGUE = re.compile(r"^\.?/usr/share/locale/de/LC_MESSAGES/[^/]+\.mo$")
_PLACEHOLDER = re.compile(
    r"%(?:\d+\$)?[-+ #0']*\d*(?:\.\d+)?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcspn]"
    r"|%\([a-zA-Z_]\w*\)[sdifr]|\{[a-zA-Z_0-9]*\}|\$\{?[A-Z_]+\}?"
)
_ACCELERATOR = re.compile(r"(?<![\w&_])[_&](?=\w)")
_MARKUP = re.compile(r"</?[a-zA-Z][^<>]*>")


@dataclass(frozen=True)
class Pair:
    english: str
    german: str
    package: str


def build_corpus(packages_dir: Path | None = None) -> Path:
    """Fetch the packages (reused if present) and write train/dev/test TSVs; returns the folder."""
    out = cache_dir("translator", "corpus")
    if (out / "manifest.json").exists():
        return out
    debs = fetch_packages(
        TRAIN_PACKAGES + DEV_PACKAGES + TEST_PACKAGES,
        packages_dir or cache_dir("translator", "debs"),
    )
    pairs = {package: clean_pairs(catalogue_pairs(deb), package) for package, deb in debs.items()}
    splits = split_by_package(pairs)
    for name, rows in splits.items():
        write_text(
            out / f"{name}.tsv", "".join(f"{p.english}\t{p.german}\t{p.package}\n" for p in rows)
        )
    manifest = {
        "packages": {package: deb.name for package, deb in debs.items()},
        "pairs": {name: len(rows) for name, rows in splits.items()},
    }
    write_text(out / "manifest.json", json.dumps(manifest, indent=2))
    return out


def read_split(corpus: Path, split: str) -> list[Pair]:
    lines = (corpus / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
    return [Pair(*line.split("\t")) for line in lines]


def fetch_packages(packages: tuple[str, ...], into: Path) -> dict[str, Path]:
    """`apt-get download` each package not already in `into`; returns package -> .deb path."""
    missing = [p for p in packages if not list(into.glob(f"{p}_*.deb"))]
    if missing:
        with tempfile.TemporaryDirectory(dir=into) as tmp:
            os.chmod(tmp, 0o777)  # apt drops to its _apt user for the download
            subprocess.run(["apt-get", "download", "-qq", *missing], cwd=tmp, check=True)
            for deb in Path(tmp).glob("*.deb"):
                deb.rename(into / deb.name)
    return {p: sorted(into.glob(f"{p}_*.deb"))[-1] for p in packages}


def catalogue_pairs(deb: Path) -> Iterator[tuple[str, str]]:
    """(msgid, msgstr) of every German catalogue in the package; plurals give their singular."""
    tar_stream = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryFile() as buffer:
        buffer.write(tar_stream)
        buffer.seek(0)
        with tarfile.open(fileobj=buffer) as archive:
            for member in archive:
                if member.isfile() and _CATALOGUE.match(member.name):
                    for entry in polib.mofile(archive.extractfile(member).read()):
                        german = entry.msgstr or entry.msgstr_plural.get(0, "")
                        yield entry.msgid, german


def clean_pairs(raw: Iterator[tuple[str, str]], package: str) -> list[Pair]:
    pairs, seen = [], set()
    for english, german in raw:
        english, german = normalise(english), normalise(german)
        if not english or not german or english == german or (english, german) in seen:
            continue
        if sorted(_PLACEHOLDER.findall(english)) != sorted(_PLACEHOLDER.findall(german)):
            continue
        if max(len(english.split()), len(german.split())) > MAX_WORDS or not re.search(
            r"[a-zA-Z]{2}", english
        ):
            continue
        seen.add((english, german))
        pairs.append(Pair(english, german, package))
    return pairs


def normalise(text: str) -> str:
    """One line of plain text: markup and keyboard accelerators removed, whitespace collapsed."""
    text = _ACCELERATOR.sub("", _MARKUP.sub("", text))
    return " ".join(text.split())


def split_by_package(pairs: dict[str, list[Pair]]) -> dict[str, list[Pair]]:
    def gather(packages):
        return [p for package in packages for p in pairs[package]]

    test = _unique(gather(TEST_PACKAGES))
    dev = [p for p in _unique(gather(DEV_PACKAGES)) if p.english not in {t.english for t in test}]
    held_out = {p.english for p in dev + test}
    train = [p for p in _unique(gather(TRAIN_PACKAGES)) if p.english not in held_out]
    return {"train": train, "dev": dev, "test": test}


def _unique(pairs: list[Pair]) -> list[Pair]:
    """One pair per English message (the first package's translation wins)."""
    first = {}
    for p in pairs:
        first.setdefault(p.english, p)
    return list(first.values())
