"""The peers the benchmarks run (benchmarks/rivals.py)."""

import pytest

from benchmarks import rivals


def test_a_benchmark_without_quark_stops_as_it_starts_with_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(rivals, "QUARK_PYTHON", tmp_path / "absent" / "python")
    with pytest.raises(SystemExit, match=r"AMD Quark is not installed: no .*absent/python \(run"):
        rivals.require_quark()
