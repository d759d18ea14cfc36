import models.translator.corpus as corpus
from models.translator.corpus import Pair, clean_pairs, normalise, split_by_package


def test_cleaning_drops_untranslated_identical_duplicate_and_mismatched_placeholder_pairs():
    raw = [
        ("Open _File", "_Datei öffnen"),
        ("Open _File", "_Datei öffnen"),  # duplicate
        ("Cancel", ""),  # untranslated
        ("OK", "OK"),  # identical
        ("Copied %d files to %s", "%d Dateien nach %s kopiert"),
        ("Copied %d files", "Dateien kopiert"),  # placeholder lost
        ("Hello {name}", "Hallo {name}"),
        ("<b>Bold</b> text", "<b>Fetter</b> Text"),
        ("%s", "%s"),
    ]
    pairs = clean_pairs(iter(raw), "pkg")
    assert [(p.english, p.german) for p in pairs] == [
        ("Open File", "Datei öffnen"),
        ("Copied %d files to %s", "%d Dateien nach %s kopiert"),
        ("Hello {name}", "Hallo {name}"),
        ("Bold text", "Fetter Text"),
    ]


def test_normalise_keeps_snake_case_and_ampersands_between_words():
    assert normalise("  a_b  &File\n x & y ") == "a_b File x & y"


def test_splits_are_by_package_and_train_never_sees_a_test_or_dev_sentence(monkeypatch):
    monkeypatch.setattr(corpus, "TRAIN_PACKAGES", ("a",))
    monkeypatch.setattr(corpus, "DEV_PACKAGES", ("b",))
    monkeypatch.setattr(corpus, "TEST_PACKAGES", ("c",))
    pairs = {
        "a": [Pair("Save", "Speichern", "a"), Pair("Quit", "Beenden", "a")],
        "b": [Pair("Undo", "Rückgängig", "b"), Pair("Open", "Öffnen", "b")],
        "c": [Pair("Save", "Sichern", "c"), Pair("Open", "Öffnen", "c")],
    }
    splits = split_by_package(pairs)
    assert [p.english for p in splits["train"]] == ["Quit"]
    assert [p.english for p in splits["dev"]] == ["Undo"]
    assert [p.english for p in splits["test"]] == ["Save", "Open"]
