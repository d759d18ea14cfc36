"""The zoo in reduced form: each real packaged model quantized by the CLI on a few samples, as a
user would, then its task metric against FP32 (benchmarks/zoo). The reduced form skips the CLI's
timing steps (per-node kernel timing, fidelity-floor trials: tests/test_kernel_timing.py and
tests/test_fallback.py test them); one model, the smallest, runs with every default. The full
run with timings and rivals is `python -m benchmarks.zoo`."""

import numpy as np
import onnx
import pytest

from benchmarks.weight_formats import measured_models
from benchmarks.zoo import captcha, layout, yolo
from benchmarks.zoo.run import (
    REDUCED,
    all_models,
    fidelity_verdict,
    fixed_batch,
    made_for_openvino,
    rival_fidelity,
    run_model,
    table,
)
from quantize.pipeline import WHOLE_FP32
from quantize.target import WEIGHT_FORMATS
from quantize.validate import OUTPUT_FLOOR_DB

SUITE = dict(REDUCED, calibration=12)


def _check_fidelity_measured(record: dict) -> None:
    assert record["status"] == "ok"
    detail = record["fidelity_detail"]
    assert detail["fp32_cleaned"]["meets"] and detail["fp32_cleaned"]["value"] >= 0.999
    assert record["output_sqnr_db"] >= 20 or record["verdict"] == "low"
    assert 0 <= record["fidelity"] <= 1 and record["meets_fidelity"] == detail["int8"]["meets"]
    assert record["weights"] in WEIGHT_FORMATS


@pytest.mark.parametrize("model", all_models(), ids=lambda m: m.name)
def test_a_packaged_model_quantizes_on_a_few_samples_and_its_fidelity_is_measured(model):
    record = run_model(model, **SUITE)
    _check_fidelity_measured(record)
    assert record["kernel_timing"].startswith("off")
    assert record["accuracy_fallback"] == []  # --keep-low-fidelity: the floor sends none back
    assert record["group_cost"] == ""  # nor weighs a group step
    shifted = record.get("fp32_shifted_one_pixel")  # FP32 against itself, images moved a pixel
    assert (shifted is None) == model.name.startswith("all-MiniLM")  # token ids have no pixels
    assert shifted is None or 0 <= shifted["value"] <= 1


def test_a_packaged_model_quantizes_with_every_cli_default():
    (classifier,) = [m for m in all_models() if m.name.endswith("direction classifier")]
    record = run_model(classifier, **dict(SUITE, cli_options=()))
    _check_fidelity_measured(record)
    assert record["kernel_timing"].startswith("measured on this CPU")
    assert "x the FP32 graph's speed" in record["speed_check"]  # measured, whatever it decided
    ours = record["quantize_seconds"]["int8"]  # the CLI's wall time; no rival ran
    assert ours > 0 and f"| {ours:.0f} / - / - / - / - |" in table([record])


def test_the_table_marks_a_model_the_speed_check_kept_fp32_whole():
    kept = f"the INT8 model was not 5% faster than FP32 here (...): {WHOLE_FP32}"
    record = {"name": "m", "exporter": "e", "opset": 13, "status": "ok", "fidelity": 1.0}
    record.update(meets_fidelity=True, fidelity_target="t", int8_over_ort_static=None)
    rows = [
        table([dict(record, int8_over_fp32_cleaned=0.94, speed_check=check)]).splitlines()[-1]
        for check in (kept, "INT8 1.5x the FP32 graph's speed (...): INT8 kept")
    ]
    assert "| 0.94x (FP32 kept: same graph) |" in rows[0] and "FP32 kept" not in rows[1]


def test_a_rivals_fidelity_is_marked_against_the_target_or_says_how_the_rival_failed():
    record = {
        "fidelity_detail": {"ort_dynamic": {"value": 0.9922, "meets": False}},
        "rivals": {"ort_static": {"status": "does not run: InvalidGraph: [ONNXRuntimeError] x"}},
    }
    assert rival_fidelity(record, "ort_dynamic") == "0.9922 misses"
    assert rival_fidelity(record, "ort_static") == "does not run: InvalidGraph"


def test_ours_made_for_openvino_is_marked_where_its_speed_check_kept_it_fp32():
    kept = f"the INT8 model was not 5% faster than FP32 here (... in openvino): {WHOLE_FP32}"
    records = [
        {
            "fidelity_detail": {"int8_openvino": {"value": 1.0, "meets": True}},
            "rivals": {"int8_openvino": {"status": "ok", "speed_check": check}},
        }
        for check in (kept, "INT8 1.30x the FP32 graph's speed (... in openvino): INT8 kept")
    ]
    assert rival_fidelity(records[0], "int8_openvino") == "1.0000 meets (FP32 kept)"
    assert rival_fidelity(records[1], "int8_openvino") == "1.0000 meets"


def test_ours_made_for_openvino_records_what_its_fidelity_floor_did(conv_model, calib_npz):
    int8, made = made_for_openvino(conv_model, calib_npz, ())
    assert "in openvino" in made["speed_check"]
    assert set(made["accuracy_fallback"]) <= {n.name for n in int8.graph.node}
    assert made["output_sqnr_db"] >= OUTPUT_FLOOR_DB or made["accuracy_fallback"]
    assert made["group_cost"] == "" or "the time of the model before it" in made["group_cost"]


def _layout_outputs(centres: list[tuple[int, int]]) -> list[np.ndarray]:
    """A page's eight layout outputs (batch 1) with one text region at each (row, column) of the
    stride-8 grid: its score 0.9, every box distribution flat (each side 3.5 strides)."""
    shapes = [(-(-layout.HEIGHT // s)) * (-(-layout.WIDTH // s)) for s in layout.STRIDES]
    scores = [np.zeros((1, n, 10), np.float32) for n in shapes]
    for row, column in centres:
        scores[0][0, row * -(-layout.WIDTH // 8) + column, 0] = 0.9
    return scores + [np.zeros((1, n, 32), np.float32) for n in shapes]


def test_the_layout_metric_scores_regions_int8_misses_adds_or_moves():
    apart = [(10, 10), (10, 40), (50, 10), (50, 40)]  # 56-pixel boxes, 240 pixels apart
    fp32 = [_layout_outputs(apart)]
    assert layout._region_f1(None, fp32, fp32) == {"value": 1.0, "regions": 4, "meets": True}
    missed = layout._region_f1(None, fp32, [_layout_outputs(apart[:3])])
    assert missed["value"] == pytest.approx(2 * 3 / (3 + 4)) and not missed["meets"]
    moved = [_layout_outputs([(10, 10), (10, 40), (50, 10), (50, 46)])]  # 48 pixels: IoU 0.08
    assert layout._region_f1(None, fp32, moved)["value"] == pytest.approx(2 * 3 / 8)
    doubled = [_layout_outputs(apart + [(11, 10)])]  # 8 pixels off: suppressed as the same region
    assert layout._region_f1(None, fp32, doubled)["value"] == 1.0


def _yolo_output(anchors: list[tuple[float, float, float, int, float]]) -> list[np.ndarray]:
    """One image's YOLOv8n output (batch 1): each anchor given as (x, y, side, class, score), a
    square box at (x, y); the other anchors score nothing."""
    rows = np.zeros((1, 4 + 18, 2100), np.float32)
    for i, (x, y, side, label, score) in enumerate(anchors):
        rows[0, :4, i] = x, y, side, side
        rows[0, 4 + label, i] = score
    return [rows]


def test_the_yolo_metric_also_scores_the_detections_nudenet_reports():
    faces = [(80, 80, 40, 1, 0.9), (240, 200, 60, 3, 0.6)]
    fp32 = [_yolo_output(faces + [(82, 80, 40, 1, 0.8), (160, 160, 50, 2, 0.2)])]
    # the second anchor on the first face is suppressed; one under NudeNet's 0.25 is not reported
    same = yolo._anchors_and_detections(None, fp32, fp32)
    assert same["value"] == 1.0 and same["detection_f1"] == 1.0 and same["detections"] == 2
    # INT8 loses the second face under the threshold and moves a sub-threshold anchor's score
    int8 = [
        _yolo_output([faces[0], (240, 200, 60, 3, 0.24), (82, 80, 40, 1, 0.8), (0, 0, 9, 2, 0.2)])
    ]
    moved = yolo._anchors_and_detections(None, fp32, int8)
    assert moved["detection_f1"] == pytest.approx(2 * 1 / 3)
    assert moved["value"] == pytest.approx(8 / 10)  # two of the ten top anchors moved
    record = {"fidelity": moved["value"], "meets_fidelity": False}
    verdict = fidelity_verdict(dict(record, fidelity_detail={"int8": moved}))
    assert verdict == "0.8000 misses (detections F1 0.6667)"


def test_ort_static_is_calibrated_at_a_modelsfixed_batch_and_in_eights_otherwise():
    model = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 3])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None, 3])],
        )
    )
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    for dim, expected in ((1, 1), (4, 4), (-1, None), (0, None)):  # Paddle2ONNX writes -1
        batch.dim_value = dim
        assert fixed_batch(model) == expected
    batch.dim_param = "batch"
    assert fixed_batch(model) is None


def test_the_captcha_metric_counts_captchas_fp32_reads_right_that_int8_reads_right_too():
    truths = [captcha._captcha(i, "evaluation")[1] for i in range(3)]
    right = [[_captcha_logits(t.upper())] for t in truths]  # case is ignored, as users type it
    wrong = [[_captcha_logits(t[:-1])] for t in truths]
    assert captcha._read_right_as_fp32(truths, right, right)["value"] == 1.0
    lost_one = captcha._read_right_as_fp32(truths, right, right[:2] + wrong[2:])
    assert lost_one["value"] == pytest.approx(2 / 3) and not lost_one["meets"]
    found_one = captcha._read_right_as_fp32(truths, right[:2] + wrong[2:], right)
    assert found_one["value"] == 1.0 and found_one["int8_solved"] == 3  # FP32 read two right


def _captcha_logits(text: str) -> np.ndarray:
    """CTC logits (steps, 1, classes) that read `text`: each letter, then a blank."""
    charset = captcha._charset()
    steps = [i for letter in text for i in (charset.index(letter), 0)]
    logits = np.zeros((len(steps), 1, len(charset)), np.float32)
    logits[np.arange(len(steps)), 0, steps] = 1.0
    return logits


def test_the_weight_format_benchmark_measures_every_zoo_model_but_minilms_second_export():
    measured = [m.name for m in measured_models()]  # EasyOCR's, a dynamo export too, among them
    assert measured == [m.name for m in all_models() if m.name != "all-MiniLM-L6-v2 (dynamo)"]
    assert "EasyOCR English recogniser" in measured
