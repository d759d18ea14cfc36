from models import progress


def test_the_eta_counts_this_runs_own_pace_from_where_it_resumed(monkeypatch):
    clock = iter([0.0, 60.0, 61.0, 120.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    lines = []
    line = progress.ProgressLine(8, lines.append, every_seconds=30, unit="epoch", decimals=2)
    line.update(4.0, "loss 3.000")  # resumed half-way
    line.update(5.0)
    line.update(5.5)  # a second after the last line: silent
    line.update(8.0)  # the end: always said
    assert lines == [
        "training: epoch 4.00/8.00 (50 %), loss 3.000, ETA unknown",
        "training: epoch 5.00/8.00 (62 %), about 3 min left",
        "training: epoch 8.00/8.00 (100 %), about 0 min left",
    ]


def test_a_benchmark_names_its_own_task_and_unit():
    lines = []
    progress.ProgressLine(3, lines.append, unit="run", task="timing").update(1)
    assert lines == ["timing: run 1/3 (33 %), ETA unknown"]
