"""The labeled-data reader never loses a line silently (issue 19): TSV without quote rules, CSV rows checked
against the header, large fields, line counts, and warnings on data that reads but looks wrong."""

from __future__ import annotations

from mlx_edge.data import LabeledData, LabelMap


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_labels_that_look_like_numbers_but_are_not_sort_as_text():
    # "²" passes str.isdigit and "--5" passes lstrip("-").isdigit, but int() refuses both
    assert LabelMap.from_data(LabeledData(["a", "b", "c"], ["²", "1", "10"])).labels == ["1", "10", "²"]
    assert LabelMap.from_data(LabeledData(["a", "b"], ["--5", "-3"])).labels == ["--5", "-3"]
    assert LabelMap.from_data(LabeledData(["a", "b", "c"], ["10", "-3", "2"])).labels == ["-3", "2", "10"]
