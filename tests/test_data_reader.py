"""The labeled-data reader never loses a line silently (issue 19): TSV without quote rules, CSV rows checked
against the header, large fields, line counts, and warnings on data that reads but looks wrong."""

from __future__ import annotations

import csv
import json
import random
import warnings

import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.data import FileLines, LabeledData, LabelMap, load_splits, read_labeled
from mlx_edge.errors import DataError, DataWarning

QUOTES = (
    'text\tlabel\n"Hello there\tpositive\nsecond line ok\tnegative\nthird "quoted" thing\tpositive\nfourth\tnegative\n'
)


def write(path, text):
    path.write_text(text, encoding="utf-8", newline="")
    return path


def data_warnings(read, *args, **kwargs) -> tuple[object, list[str]]:
    """What `read` returns, and the DataWarnings it gave (every one, even a repeat)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = read(*args, **kwargs)
    return result, [str(w.message) for w in caught if issubclass(w.category, DataWarning)]


def test_labels_that_look_like_numbers_but_are_not_sort_as_text():
    # "²" passes str.isdigit and "--5" passes lstrip("-").isdigit, but int() refuses both
    assert LabelMap.from_data(LabeledData(["a", "b", "c"], ["²", "1", "10"])).labels == ["1", "10", "²"]
    assert LabelMap.from_data(LabeledData(["a", "b"], ["--5", "-3"])).labels == ["--5", "-3"]
    assert LabelMap.from_data(LabeledData(["a", "b", "c"], ["10", "-3", "2"])).labels == ["-3", "2", "10"]


def test_tsv_quotes_are_text_and_every_line_is_a_row(tmp_path):
    data = read_labeled(write(tmp_path / "q.tsv", QUOTES))
    assert data.texts == ['"Hello there', "second line ok", 'third "quoted" thing', "fourth"]
    assert data.labels == ["positive", "negative", "positive", "negative"]
    assert data.line_numbers == [2, 3, 4, 5]
    assert data.file_lines == FileLines(lines=5, rows=4, header=1, blank=0)
    assert str(data.file_lines) == "4 rows from 5 lines (1 header)"


def test_quoted_tsv_only_when_asked_and_a_merged_row_is_named(tmp_path):
    path = write(tmp_path / "q.tsv", 'text\tlabel\n"a tab\there"\tx\nplain\ty\n')
    assert read_labeled(path, tsv_quoted=True).texts == ["a tab\there", "plain"]
    with pytest.raises(DataError, match=r"line 2 has 3 columns, the header has 2"):
        read_labeled(path)  # unquoted, the tab inside the quotes is a third field: an error, not a guess
    # CSV quote rules on the file merge lines 2-4 into one row: it reads, but the warning names them
    data, said = data_warnings(read_labeled, write(tmp_path / "merged.tsv", QUOTES), tsv_quoted=True)
    assert len(data) == 2
    assert any("1 rows run over several lines (lines 2-4)" in line for line in said), said


def test_a_real_world_sized_tsv_keeps_every_line_exactly(tmp_path):
    rng = random.Random(19)
    pieces = [
        '"',
        "''",
        '"quoted"',
        "复习线性代数",
        "交房租 🎉",
        "emoji 👍🏽 ok",
        "a,b",
        "x\u2028y",
        'end"',
        "\u00a0nbsp",
    ]
    labels = ["finance", "health", "study"]
    rows = []
    for i in range(10_000):
        words = [rng.choice(pieces) for _ in range(rng.randint(1, 6))]
        rows.append((f"{' '.join(words)} #{i}", labels[i % 3]))
    rows[0] = ('"opens a quote', "finance")
    rows[1] = ('closes one"', "health")
    rows[2] = ('"', "study")
    path = tmp_path / "big.tsv"
    path.write_bytes(("text\tlabel\r\n" + "".join(f"{t}\t{y}\r\n" for t, y in rows) + "\r\n\r\n").encode("utf-8-sig"))
    data, said = data_warnings(read_labeled, path)
    assert len(data) == 10_000
    assert data.texts == [t for t, _ in rows] and data.labels == [y for _, y in rows]
    assert data.line_numbers == list(range(2, 10_002))
    assert data.file_lines == FileLines(lines=10_003, rows=10_000, header=1, blank=2)
    assert said == []  # clean data: no warning


def test_csv_with_an_unquoted_comma_names_the_line(tmp_path):
    body = 'text,label\n"quoted, fine",a\nPay rent, then call mom,b\nok,a\nyes,b\n'
    with pytest.raises(DataError, match=r"line 3 has 3 columns, the header has 2 \(quote a text"):
        read_labeled(write(tmp_path / "a.csv", body))
    many = "text,label\n" + "".join(
        f"row {i}, more,{'ab'[i % 2]}\n" if i % 3 == 0 else f"row {i},a\n" for i in range(20)
    )
    with pytest.raises(DataError, match=r"7 rows do not have the 2 columns the header has: line 2 has 3, line 5 has 3"):
        read_labeled(write(tmp_path / "b.csv", many))
    headerless = write(tmp_path / "c.csv", "fine,a\nnot, fine,b\n")
    with pytest.raises(DataError, match=r"line 2 has 3 columns, the first row has 2"):
        read_labeled(headerless)


def test_an_unclosed_csv_quote_is_an_error_naming_where_it_starts(tmp_path):
    body = 'text,label\nok,a\n"Hello there,b\nsecond,a\nthird,b\n'
    with pytest.raises(DataError, match=r"line 3 \(a quoted field running to line 5\) has 1 columns"):
        read_labeled(write(tmp_path / "a.csv", body))


@pytest.mark.parametrize("name, tsv_quoted", [("a.csv", False), ("a.tsv", False), ("a.tsv", True)])
def test_a_200000_character_field_reads(tmp_path, name, tsv_quoted):
    limit = csv.field_size_limit()
    sep = "," if name.endswith("csv") else "\t"
    long = "长" * 100_000 + "x" * 100_000
    data = read_labeled(write(tmp_path / name, f"text{sep}label\n{long}{sep}a\nshort{sep}b\n"), tsv_quoted=tsv_quoted)
    assert data.texts == [long, "short"] and len(data.texts[0]) == 200_000
    assert csv.field_size_limit() == limit  # put back: the limit is the whole process's


def test_jsonl_crlf_bom_trailing_blank_lines_and_a_line_separator_in_a_text(tmp_path):
    rows = [{"text": "one\u2028two", "label": "a"}, {"text": "三 🎉", "label": "b"}]
    rows += [{"text": "x\u0085y\x0cz", "label": "a"}]  # str.splitlines would cut at all three
    body = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n\r\n\r\n"
    path = tmp_path / "a.jsonl"
    path.write_bytes(("\ufeff" + body).encode("utf-8"))
    data, said = data_warnings(read_labeled, path)
    assert data.texts == [r["text"] for r in rows]
    assert data.file_lines == FileLines(lines=5, rows=3, header=0, blank=2)
    assert said == [f"{path}: 1 label has one example only: 'b' (line 2): too few to learn or to measure a class"]


def test_labels_that_differ_only_in_case_spaces_hyphens_or_underscores_are_named(tmp_path):
    body = "text,label\n" + "".join(f"text {i},{['to-do', 'done'][i % 2]}\n" for i in range(20))
    body += "text 20,To Do\ntext 21,Done \ntext 22,to_do\n"  # lines 22-24; 'Done ' is read as 'Done'
    path = write(tmp_path / "a.csv", body)
    data, said = data_warnings(read_labeled, path)
    assert set(data.labels) == {"to-do", "done", "To Do", "Done", "to_do"}  # taken as written: five classes
    assert said[0] == (
        f"{path}: labels that differ only in case, spaces, hyphens or underscores: 'to-do' (line 2) and 'To Do' (line 22) "
        "and 'to_do' (line 24); 'done' (line 3) and 'Done' (line 23): each is a class of its own; write them "
        "the same if they mean one"
    )
    chinese = write(
        tmp_path / "b.csv", "text,label\n" + "".join(f"句子{i},{['提醒', '购物'][i % 2]}\n" for i in range(20))
    )
    assert data_warnings(read_labeled, chinese)[1] == []  # two different Chinese labels are not alike
    numbers = write(
        tmp_path / "c.csv", "text,label\n" + "".join(f"text {i},{['1.0', '10'][i % 2]}\n" for i in range(20))
    )
    assert data_warnings(read_labeled, numbers)[1] == []  # a dot is not ignored: 1.0 and 10 are not alike


def test_warnings_name_repeats_labels_seen_once_and_too_many_labels(tmp_path):
    body = "text,label\n" + "".join(f"text {i},{'ab'[i % 2]}\n" for i in range(20))
    body += "text 3,a\ntext 5,b\nlonely,c\n"  # line 22 repeats line 5 with another label, line 23 = line 7
    path = write(tmp_path / "a.csv", body)
    _, said = data_warnings(read_labeled, path)
    assert said == [
        f"{path}: 2 texts repeat an earlier row, 1 of them with another label (e.g. line 22 repeats line 5): "
        "repeats weigh double and can land in train and dev",
        f"{path}: 1 label has one example only: 'c' (line 24): too few to learn or to measure a class",
    ]
    swapped = write(tmp_path / "b.csv", "label,text\n" + "".join(f"text {i},x\n" for i in range(10)))
    _, said = data_warnings(read_labeled, swapped)
    assert said[1:] == [
        f"{swapped}: 10 distinct labels in 10 rows (10 seen once): the texts have only 1 distinct values: "
        "the text and label columns look swapped (--text-column and --label-column name them)"
    ]
    assert said[0].startswith(f"{swapped}: 9 texts repeat an earlier row")  # "x" as the text: swapped columns
    ids = write(tmp_path / "d.csv", "text,label\n" + "".join(f"text {i},id{i}\n" for i in range(10)))
    _, said = data_warnings(read_labeled, ids)  # an id column taken for the label: the texts are all different
    assert said == [
        f"{ids}: 10 distinct labels in 10 rows (10 seen once): is the label column the right one? "
        "(--label-column names it)"
    ]
    few = write(tmp_path / "c.csv", "text,label\none,a\ntwo,b\nthree,a\n")
    assert "distinct labels" not in " ".join(data_warnings(read_labeled, few)[1])  # 3 rows: small, not a wrong column


def test_dev_texts_in_training_warn_and_clean_splits_do_not(tmp_path):
    train = write(tmp_path / "train.tsv", "".join(f"train text {i}\t{'ab'[i % 2]}\n" for i in range(20)))
    dev = write(tmp_path / "dev.tsv", "".join(f"dev text {i}\t{'ab'[i % 2]}\n" for i in range(6)))
    leaky = write(tmp_path / "leaky.tsv", "dev text 0\ta\ntrain text 7\tb\ntrain text 4\ta\ndev text 3\tb\n")
    (_, _, _), said = data_warnings(load_splits, train, dev)
    assert said == []
    (_, _, _), said = data_warnings(load_splits, train, leaky)
    assert said == [
        f"2 of 4 dev texts in {leaky} are also training texts in {train} (e.g. dev line 2 is train line 8): "
        "the dev score will overstate the model"
    ]


def test_odd_labels_and_out_of_range_columns_are_data_not_crashes(tmp_path):
    path = write(tmp_path / "a.tsv", "".join(f"text {i}\t{['²', '--5', '1'][i % 3]}\n" for i in range(9)))
    _, _, label_map = load_splits(path)
    assert label_map.labels == ["--5", "1", "²"]
    with pytest.raises(DataError, match=r"has 2 columns and no header: column indexes 0, 5 are out of range"):
        read_labeled(path, text_column="0", label_column="5")
    with pytest.raises(DataError, match=r"column indexes -1, 1 are out of range"):
        read_labeled(path, text_column="-1", label_column="1")


def test_cli_data_counts_lines_and_lists_what_looks_wrong(tmp_path):
    path = write(tmp_path / "q.tsv", QUOTES)
    result = CliRunner().invoke(main, ["data", str(path)])
    assert result.exit_code == 0, result.output
    assert f"read {path}: 4 rows from 5 lines (1 header)" in result.output
    assert "looks wrong" not in result.output  # clean data: no warning block
    result = CliRunner().invoke(main, ["data", str(path), "--dev", str(path), "--json"])
    summary = json.loads(result.output)
    assert summary["train"]["file"] == {"lines": 5, "rows": 4, "header": 1, "blank": 0}
    assert summary["dev"]["examples"] == 4
    assert summary["warnings"] == [
        f"4 of 4 dev texts in {path} are also training texts in {path} (e.g. dev line 2 is train line 2): "
        "the dev score will overstate the model"
    ]
    bad = write(tmp_path / "bad.csv", "text,label\nfine,a\nnot, fine,b\n")
    result = CliRunner().invoke(main, ["data", str(bad)])
    assert result.exit_code == DataError.exit_code
    assert result.output.strip().splitlines() == [
        f'Error: {bad} line 3 has 3 columns, the header has 2 (quote a text that holds a comma ("like, this") '
        "and close every opened quote)"
    ]
