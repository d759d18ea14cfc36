"""`python -m benchmarks.zoo_targets`: every zoo model's task fidelity on an AVX2 CPU, quantized
by the CLI's defaults for that target (`quantize MODEL --calib DATA --target avx2 --serve-batch N`).

The INT8 models run on an emulated CPU (../shared/tools/as-cpu avx2, qemu: MLAS takes its AVX2
kernels, whose u8s8 products saturate in int16, whatever the host), so this runs on any machine;
fidelity only, emulated speed means nothing, and kernel timing is off for a model not made for
this CPU. Each model is also run natively beside it: with paired, int7 or uint8 weights the
integer GEMMs and convolutions compute the same on both paths, but float nodes and other kernels
(element-wise requantization) may round differently per ISA, and a value moved across a rounding
boundary moves the next uint8 level; the largest output difference is recorded. Fidelity is
measured against FP32 as exported, run natively, on the zoo's held-out inputs (`benchmarks/zoo`).
Writes benchmarks/results/zoo_targets.{json,md}.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from benchmarks.results import sized, write_results
from benchmarks.targets import AS_CPU
from benchmarks.zoo.run import (
    FULL,
    REDUCED,
    all_models,
    cli_status,
    fidelity_verdict,
    quantize_cli,
)
from benchmarks.zoo.zoo_model import ZooModel
from calibration import load_feeds, save_feeds
from quantize.runtime import session
from quantize.target import host_isa

SIZE = sized(FULL, REDUCED)
TARGET = "avx2"


def main() -> None:
    if not AS_CPU.exists():
        raise SystemExit(f"zoo_targets: {AS_CPU} is missing (the AVX2 emulator)")
    records, emulated_isa = [], None
    for model in all_models():
        record, isa = _fidelity_on_avx2(model)
        records.append(record)
        emulated_isa = isa or emulated_isa
        print(json.dumps(record), flush=True)
    result = {
        "target": TARGET,
        "isa_emulated": emulated_isa,
        "isa_native": host_isa(),
        "models": records,
    }
    markdown = _markdown(result)
    path = write_results("zoo_targets", result, markdown)
    print(markdown)
    print(f"wrote {path}")


def _fidelity_on_avx2(model: ZooModel) -> tuple[dict, dict | None]:
    feeds = model.evaluation(SIZE["evaluation"])
    batch = len(next(iter(feeds[0].values())))
    record = {"name": model.name, "fidelity_target": model.fidelity_target}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        np.savez(tmp / "calib.npz", **model.calibration(SIZE["calibration"]))
        options = ("--target", TARGET, "--serve-batch", str(batch), *SIZE.get("cli_options", ()))
        run, int8 = quantize_cli(model.build(), tmp / "calib.npz", options)
        if int8 is None:
            return {**record, "status": cli_status(run)}, None
        summary = json.loads(run.stdout)
        onnx.save(int8, tmp / "int8.onnx")
        fp32 = _outputs(session(model.build()), feeds)
        native = _outputs(session(tmp / "int8.onnx"), feeds)
        emulated, isa = _emulated_outputs(tmp, feeds)
    fidelity = {
        name: model.fidelity(feeds, fp32, outputs)
        for name, outputs in (("emulated", emulated), ("native", native))
    }
    difference = max(
        float(np.max(np.abs(a - b))) for e, n in zip(emulated, native) for a, b in zip(e, n)
    )
    return {
        **record,
        "status": "ok",
        "weights": summary["weights"]["format"],
        "weight_choice": summary["weights"]["choice"],
        "verdict": summary["fidelity"]["verdict"],
        "output_sqnr_db": summary["fidelity"]["output_sqnr_db_min"],
        "fidelity": fidelity["emulated"]["value"],
        "meets_fidelity": fidelity["emulated"]["meets"],
        "fidelity_detail": {"int8": fidelity["emulated"], "native": fidelity["native"]},
        "max_output_difference_to_native": difference,
    }, isa


def _outputs(sess, feeds: list[dict]) -> list[list[np.ndarray]]:
    return [sess.run(None, feed) for feed in feeds]


def _emulated_outputs(folder: Path, feeds: list[dict]) -> tuple[list[list[np.ndarray]], dict]:
    """The INT8 model's outputs on `feeds`, computed by benchmarks/zoo_targets_child.py under
    qemu's AVX2-only CPU, and that CPU's INT8 path."""
    save_feeds(folder / "feeds.npz", feeds)
    run = subprocess.run(  # its errors go to our stderr
        [str(AS_CPU), TARGET, sys.executable, "-m", "benchmarks.zoo_targets_child"]
        + [str(folder / "int8.onnx"), str(folder / "feeds.npz"), str(folder / "outputs.npz")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    if run.returncode != 0:
        raise SystemExit(f"zoo_targets: the emulated run failed (exit {run.returncode})")
    outputs = [[o[str(j)] for j in range(len(o))] for o in load_feeds(folder / "outputs.npz")]
    return outputs, json.loads(run.stdout)["isa"]


def _markdown(r: dict) -> str:
    isa = r["isa_emulated"] or {}
    lines = [
        f"# Model zoo on an emulated AVX2 CPU ({isa.get('int8_gemm_path', 'not run')}), "
        "INT8 made by the CLI's defaults for avx2",
        "",
        "Fidelity only, against FP32 as exported (run natively on "
        f"{r['isa_native']['cpu']}); the INT8 model under emulation, and natively beside it.",
        "",
        "| model | weights | output SQNR (held-out calibration) | fidelity, emulated AVX2 "
        "| target | fidelity, native | largest output difference, emulated vs native |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in r["models"]:
        if m["status"] != "ok":
            lines.append(f"| {m['name']} | {m['status']} | | | {m['fidelity_target']} | | |")
            continue
        lines.append(
            f"| {m['name']} | {m['weights']} | {m['output_sqnr_db']:.1f} dB "
            f"| {fidelity_verdict(m)} | {m['fidelity_target']} "
            f"| {m['fidelity_detail']['native']['value']:.4f} | {m['max_output_difference_to_native']:.3g} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
