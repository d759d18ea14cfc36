"""The packages form layers: each imports only those below it, so there is no import cycle."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("onnxio", "calibration", "quantize", "physics_metrics", "models", "benchmarks")
# What each package may import of the others.
ALLOWED = {
    "onnxio": set(),
    "calibration": {"onnxio"},
    "quantize": {"onnxio", "calibration"},
    "physics_metrics": {"onnxio"},
    "models": {"onnxio", "calibration", "quantize", "physics_metrics"},
    "benchmarks": {"onnxio", "calibration", "quantize", "physics_metrics", "models"},
}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


def test_every_package_imports_only_the_layers_below_it():
    crossings = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for other in imported_packages(path) - ALLOWED[package] - {package}:
                crossings.append(f"{path.relative_to(ROOT)} imports {other}")
    assert crossings == []


def test_the_layer_check_sees_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import numpy\nfrom quantize.pipeline import quantize_\nif True:\n    import models.resnet50\n"
    )
    assert imported_packages(module) == {"quantize", "models"}
