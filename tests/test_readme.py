"""The README's results come from the committed benchmark files, and those files say where they
were made."""

import json
import sys
import types

from benchmarks import readme
from benchmarks.results import command, write_results

PROVENANCE = {"commit", "dirty", "date", "isa", "versions", "command"}


def test_the_readme_results_are_what_the_committed_json_renders():
    text = readme.README.read_text(encoding="utf-8")
    assert readme.readme_with_results(text) == text, (
        "run `python -m benchmarks.readme` after a benchmark"
    )


def test_every_committed_result_records_its_provenance():
    lacking = {
        path.stem
        for path in readme.RESULTS.glob("*.json")
        if not PROVENANCE <= json.loads(path.read_text()).keys()
    }
    assert lacking == set()


def test_a_changed_figure_shows_in_the_rendered_readme(tmp_path, monkeypatch):
    for path in readme.RESULTS.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    monkeypatch.setattr(readme, "RESULTS", tmp_path)
    before = readme.render()
    data = json.loads((tmp_path / "translator_amx.json").read_text())
    data["bleu"]["ours"] = 12.5
    (tmp_path / "translator_amx.json").write_text(json.dumps(data))
    after = readme.render()
    assert "**12.50**" in after and "12.50" not in before


def test_benchmark_results_are_written_with_their_provenance(tmp_path, monkeypatch):
    monkeypatch.setattr("benchmarks.results.RESULTS", tmp_path)
    path = write_results("probe", {"figure": 1.0}, "# probe\n")
    assert PROVENANCE <= json.loads(path.read_text()).keys()


def test_a_quick_benchmark_run_writes_beside_the_results_never_over_them(monkeypatch):
    import importlib

    import benchmarks.results as results

    full = results.RESULTS
    try:
        monkeypatch.setenv("QUANTIZE_BENCH_QUICK", "1")
        quick = importlib.reload(results)
        assert quick.RESULTS == full / "quick"
        assert quick.sized(4096, 512) == 512
        monkeypatch.delenv("QUANTIZE_BENCH_QUICK")
        assert importlib.reload(results).sized(4096, 512) == 4096
    finally:
        importlib.reload(results)
    assert results.RESULTS == full


def test_the_translator_table_warns_only_when_the_machines_translators_differ(
    tmp_path, monkeypatch
):
    stems = ["translator_avx2", "translator_vnni"]
    for stem in stems:
        (tmp_path / f"{stem}.json").write_text((readme.RESULTS / f"{stem}.json").read_text())
    monkeypatch.setattr(readme, "RESULTS", tmp_path)
    note = "Each machine trained its own translator"
    bleu = {stem: json.loads((tmp_path / f"{stem}.json").read_text())["bleu"] for stem in stems}
    assert bleu["translator_avx2"]["fp32"] != bleu["translator_vnni"]["fp32"]
    assert note in readme._translator(stems)
    data = json.loads((tmp_path / "translator_vnni.json").read_text())
    data["bleu"]["fp32"] = bleu["translator_avx2"]["fp32"]
    (tmp_path / "translator_vnni.json").write_text(json.dumps(data))
    assert note not in readme._translator(stems)


def test_the_zoo_summary_has_a_row_per_model_and_target_with_each_rivals_fidelity_beside_it():
    stems = readme._per_target("zoo")
    summary = readme._zoo(stems)
    rows = [line for line in summary.splitlines() if line.startswith("| ") and "---" not in line]
    runs = {stem: json.loads((readme.RESULTS / f"{stem}.json").read_text()) for stem in stems}
    assert len(rows) - 1 == sum(len(d["models"]) for d in runs.values())
    record = runs[stems[0]]["models"][0]
    static = record["fidelity_detail"]["ort_static"]
    verdict = "meets" if static["meets"] else "misses"
    expected = f"{record['int8_over_ort_static']:.2f}x ({static['value']:.4f} {verdict})"
    row = next(r for r in rows if r.startswith(f"| {record['name']} | {stems[0][4:].upper()} |"))
    assert expected in row


def test_a_benchmark_package_is_recorded_as_the_command_that_runs_it(monkeypatch):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="benchmarks.zoo.__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/work/benchmarks/zoo/__main__.py", "--quick"])
    assert command() == "python -m benchmarks.zoo --quick"


def test_the_zoo_on_avx2_line_gives_every_model_its_emulated_fidelity():
    data = json.loads((readme.RESULTS / "zoo_targets.json").read_text())
    line = readme._zoo_targets(data)
    for model in data["models"]:
        assert model["name"] in line
    first = data["models"][0]
    assert f"{first['name']} {first['fidelity']:.4f}" in line
    first.update(fidelity=0.1234, meets_fidelity=False)
    assert f"{first['name']} 0.1234 misses" in readme._zoo_targets(data)
