"""Reading labeled files, label maps, dev splits, tokenization and length-bucketed batches."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlx_edge.data import LabeledData, LabelMap, bucketed_batches, collate, load_splits, read_labeled, split_dev
from mlx_edge.errors import DataError
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.tiny import CORPUS, build_wordpiece


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_with_header_and_quoted_commas(tmp_path):
    path = write(tmp_path / "a.csv", 'sentence,category\n"Pay rent, then call mom",finance\nRun 5km,health\n')
    data = read_labeled(path)
    assert data.texts == ["Pay rent, then call mom", "Run 5km"]
    assert data.labels == ["finance", "health"]
    assert data.line_numbers == [2, 3]


@pytest.mark.parametrize(
    "body",
    [
        "Pay rent\tfinance\nRun 5km\thealth\nCall mom\tlife\nRun again\thealth\n",
        "finance\tPay rent\nhealth\tRun 5km\nlife\tCall mom\nhealth\tRun again\n",
    ],
)
def test_tsv_without_header_finds_the_label_column(tmp_path, body):
    data = read_labeled(write(tmp_path / "a.tsv", body))
    assert data.texts == ["Pay rent", "Run 5km", "Call mom", "Run again"]
    assert data.labels == ["finance", "health", "life", "health"]


def test_jsonl_with_int_labels_and_other_names(tmp_path):
    rows = [{"content": "good", "class": 1}, {"content": "bad", "class": 0}, {"content": "ok", "class": 10}]
    path = write(tmp_path / "a.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    data = read_labeled(path)
    assert data.labels == ["1", "0", "10"]
    assert LabelMap.from_data(data).labels == ["0", "1", "10"]  # numeric, not "0","1","10" by accident


def test_given_columns_and_utf8_bom(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes("\ufeffid,body,tag\n1,复习线性代数,study\n2,交房租,finance\n".encode("utf-8"))
    data = read_labeled(path, text_column="body", label_column="tag")
    assert data.texts == ["复习线性代数", "交房租"] and data.labels == ["study", "finance"]
    headerless = write(tmp_path / "b.csv", "1,复习线性代数,study\n2,交房租,finance\n")
    by_index = read_labeled(headerless, text_column="1", label_column="2")
    assert by_index.texts == data.texts and by_index.labels == data.labels
    known_header = write(tmp_path / "c.csv", "id,text,label\n1,复习线性代数,study\n2,交房租,finance\n")
    by_index = read_labeled(known_header, text_column="1", label_column="2")
    assert by_index.texts == data.texts and by_index.labels == data.labels


def test_errors_name_the_line(tmp_path):
    with pytest.raises(DataError, match=r"line 3 is not valid JSON"):
        read_labeled(write(tmp_path / "a.jsonl", '{"text": "a", "label": "x"}\n\n{"text": "b", \n'))
    with pytest.raises(DataError, match=r"line 2: empty label"):
        read_labeled(write(tmp_path / "b.csv", "text,label\nhello,\n"))
    with pytest.raises(DataError, match=r"line 3 has 1 columns"):
        read_labeled(write(tmp_path / "c.csv", "text,label\nhello,a\nlonely\n"))


def test_stratified_split_is_seeded_and_keeps_every_class():
    labels = ["a"] * 50 + ["b"] * 30 + ["c"] * 2
    data = LabeledData([f"t{i}" for i in range(len(labels))], labels)
    train, dev = split_dev(data, fraction=0.2, seed=7)
    again_train, again_dev = split_dev(data, fraction=0.2, seed=7)
    other_train, _ = split_dev(data, fraction=0.2, seed=8)
    assert dev.texts == again_dev.texts and train.texts == again_train.texts
    assert train.texts != other_train.texts
    assert dev.counts() == {"a": 10, "b": 6, "c": 1}
    assert train.counts()["c"] == 1
    assert sorted(train.texts + dev.texts) == sorted(data.texts)


def test_load_splits_cuts_dev_when_none_given(tmp_path):
    body = "text,label\n" + "".join(f"item {i},{'ab'[i % 2]}\n" for i in range(40))
    train, dev, label_map = load_splits(write(tmp_path / "a.csv", body), dev_fraction=0.25)
    assert (len(train), len(dev)) == (30, 10)
    assert label_map.labels == ["a", "b"]


def test_bucketed_batches_cover_everything_once_with_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 120, size=1000)
    batches = bucketed_batches(lengths, 32, seed=1, epoch=0, pool_batches=10)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))
    spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
    random_spread = np.mean([lengths[b].max() - lengths[b].min() for b in np.array_split(rng.permutation(1000), 32)])
    assert spread < random_spread / 3
    again = bucketed_batches(lengths, 32, seed=1, epoch=0, pool_batches=10)
    assert all(np.array_equal(x, y) for x, y in zip(batches, again))
    next_epoch = bucketed_batches(lengths, 32, seed=1, epoch=1, pool_batches=10)
    assert not all(np.array_equal(x, y) for x, y in zip(batches, next_epoch))


def test_collate_pads_to_a_multiple_and_masks():
    ids, mask = collate([np.array([1, 2, 3]), np.array([4])], pad_id=0, multiple=8)
    assert ids.shape == mask.shape == (2, 8) and ids.dtype == np.int32
    assert mask.sum(axis=1).tolist() == [3, 1]
    assert ids[1].tolist() == [4, 0, 0, 0, 0, 0, 0, 0]
    ids, _ = collate([np.arange(10)], pad_id=0, multiple=8, max_width=12)
    assert ids.shape == (1, 12)


@pytest.mark.parametrize("files", ["tokenizer.json", "vocab.txt only"])
def test_tokenizer_matches_transformers(tmp_path, files):
    from transformers import AutoTokenizer

    directory = build_wordpiece(tmp_path / "tok")
    reference = AutoTokenizer.from_pretrained(directory)
    if files == "vocab.txt only":
        (directory / "tokenizer.json").unlink()
    texts = CORPUS + ["Ünïcödé ÀÉÎ", "emoji 🎉 and\ttabs\nnewlines", "x" * 130, "  ", "mixed中文English"]
    ours = load_tokenizer(directory).encode_batch(texts, max_length=16)
    assert ours == reference(texts, truncation=True, max_length=16)["input_ids"]


def test_tokenizer_does_not_import_torch(tmp_path):
    import subprocess
    import sys

    directory = build_wordpiece(tmp_path / "tok")
    code = (
        "import sys, mlx_edge.data, mlx_edge.models.tokenizer as t; "
        f"t.load_tokenizer({str(directory)!r}).encode_batch(['a b'], max_length=8); "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_language_of_splits_the_shipped_halves():
    from mlx_edge.data import language_of

    assert [language_of(t) for t in ("复习线性代数第三章", "明天 review 一下 PR", "Pay the bill", "Café 123", "")] == [
        "zh",
        "zh",
        "en",
        "en",
        "en",
    ]
    # extension A and the compatibility block are ideographs too, as the augment stage counts them
    assert language_of("\u3400 notes") == language_of("\uf900 notes") == "zh"
