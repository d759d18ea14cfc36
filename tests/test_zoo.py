"""The zoo in reduced form: each real packaged model quantized by the CLI with its defaults on a
few samples, as a user would, then its task metric against FP32 (benchmarks/zoo). The full run
with timings and rivals is `python -m benchmarks.zoo`."""

import pytest

from benchmarks.zoo.run import all_models, run_model

REDUCED = {"calibration": 12, "evaluation": 12, "seconds": 0.0, "rivals": False}


@pytest.mark.parametrize("model", all_models(), ids=lambda m: m.name)
def test_a_packaged_model_quantizes_with_the_cli_defaults_and_its_fidelity_is_measured(model):
    record = run_model(model, **REDUCED)
    assert record["status"] == "ok"
    detail = record["fidelity_detail"]
    assert detail["fp32_cleaned"]["meets"] and detail["fp32_cleaned"]["value"] >= 0.999
    assert record["output_sqnr_db"] >= 20 or record["verdict"] == "low"
    assert 0 <= record["fidelity"] <= 1 and record["meets_fidelity"] == detail["int8"]["meets"]
