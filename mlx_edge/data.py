"""Labeled text: read CSV/TSV/JSONL, keep a label map, cut a dev split, tokenize, batch by length.

Everything here is NumPy and the `tokenizers` library: no PyTorch, no MLX, so every stage can use it.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlx_edge.errors import DataError

TEXT_NAMES = ("text", "sentence", "content", "review", "query", "utterance", "document", "sentence1")
LABEL_NAMES = ("label", "labels", "class", "category", "intent", "target", "y")
FORMATS = ("csv", "tsv", "jsonl")


@dataclass
class LabeledData:
    """Texts with their labels as strings (ints in the file become "0", "1", ...)."""

    texts: list[str]
    labels: list[str]
    source: str = "<memory>"
    line_numbers: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def counts(self) -> Counter:
        return Counter(self.labels)

    def subset(self, indices) -> LabeledData:
        lines = [self.line_numbers[i] for i in indices] if self.line_numbers else []
        return LabeledData([self.texts[i] for i in indices], [self.labels[i] for i in indices], self.source, lines)


class LabelMap:
    """The ordered label list a model is trained on; saved in every model's config.json."""

    def __init__(self, labels: list[str]):
        if len(set(labels)) != len(labels):
            raise DataError(f"duplicate labels in {labels}")
        self.labels = list(labels)
        self._index = {label: i for i, label in enumerate(self.labels)}

    @classmethod
    def from_data(cls, data: LabeledData) -> LabelMap:
        names = set(data.labels)
        if all(_is_int(n) for n in names):
            return cls(sorted(names, key=int))
        return cls(sorted(names))

    def __len__(self) -> int:
        return len(self.labels)

    def __eq__(self, other) -> bool:
        return isinstance(other, LabelMap) and self.labels == other.labels

    def encode(self, labels: list[str]) -> np.ndarray:
        return np.array([self._index[label] for label in labels], dtype=np.int32)

    def check_known(self, data: LabeledData, split: str) -> None:
        unseen = sorted(set(data.labels) - set(self._index))
        if unseen:
            raise DataError(
                f"{split} file {data.source} has labels not seen in training: {', '.join(unseen)}",
                f"training labels are: {', '.join(self.labels)}",
            )


_INT = re.compile(r"-?[0-9]+")


def _is_int(text: str) -> bool:
    # ASCII digits and one optional minus only: str.isdigit() takes "²" and lstrip("-") takes "--5", which int() refuses
    return _INT.fullmatch(text) is not None


# ---------------------------------------------------------------------------------------- reading


def read_labeled(
    path: str | Path, *, text_column: str | None = None, label_column: str | None = None, file_format: str | None = None
) -> LabeledData:
    """Read a labeled file. Columns are given, or found by common names, or guessed for 2-column files."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"data file {path} does not exist", "check the path")
    if path.is_dir():
        raise DataError(f"{path} is a directory, not a data file", "pass a .csv, .tsv or .jsonl file")
    text = _decode(path)
    if not text.strip():
        raise DataError(f"data file {path} is empty", "it needs one labeled example per line")
    fmt = file_format or _guess_format(path, text)
    if fmt == "jsonl":
        data = _read_jsonl(path, text, text_column, label_column)
    elif fmt in ("csv", "tsv"):
        data = _read_delimited(path, text, "\t" if fmt == "tsv" else ",", text_column, label_column)
    else:
        raise DataError(f"unknown data format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if not data.texts:
        raise DataError(
            f"data file {path} is empty (a header but no labeled rows)", "it needs one labeled example per line"
        )
    return data


def _decode(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(
            f"{path} line {line} is not UTF-8 (byte 0x{raw[exc.start]:02x})",
            "save the file as UTF-8, e.g. iconv -f GBK -t UTF-8 in.csv > out.csv",
        ) from None


def _guess_format(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix == ".tsv":
        return "tsv"
    if suffix == ".csv":
        return "csv"
    first = next(line for line in text.splitlines() if line.strip())
    if first.lstrip().startswith("{"):
        return "jsonl"
    return "tsv" if "\t" in first else "csv"


def _read_jsonl(path: Path, text: str, text_column: str | None, label_column: str | None) -> LabeledData:
    texts, labels, lines = [], [], []
    text_key = label_key = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DataError(
                f"{path} line {number} is not valid JSON ({exc.msg})",
                'each line must be one JSON object like {"text": ..., "label": ...}',
            ) from None
        if not isinstance(row, dict):
            raise DataError(f"{path} line {number} is not a JSON object", 'write {"text": ..., "label": ...}')
        if text_key is None:
            keys = list(row)
            text_key = _pick_column(path, keys, text_column, TEXT_NAMES, "text")
            label_key = _pick_column(path, keys, label_column, LABEL_NAMES, "label")
        if text_key not in row or label_key not in row:
            missing = text_key if text_key not in row else label_key
            raise DataError(f"{path} line {number} has no {missing!r} field (fields: {', '.join(row)})")
        texts.append(_text_value(path, number, row[text_key]))
        labels.append(_label_value(path, number, row[label_key]))
        lines.append(number)
    return LabeledData(texts, labels, str(path), lines)


def _read_delimited(
    path: Path, text: str, delimiter: str, text_column: str | None, label_column: str | None
) -> LabeledData:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows = [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
    if not rows:
        raise DataError(f"data file {path} is empty", "it needs one labeled example per line")
    header = [cell.strip() for cell in rows[0][1]]
    if _looks_like_header(header, text_column, label_column):
        ti = header.index(_pick_column(path, header, text_column, TEXT_NAMES, "text"))
        li = header.index(_pick_column(path, header, label_column, LABEL_NAMES, "label"))
        body = rows[1:]
    else:
        ti, li = _headerless_columns(path, rows, text_column, label_column)
        body = rows
    texts, labels, lines = [], [], []
    for number, row in body:
        if max(ti, li) >= len(row):
            raise DataError(
                f"{path} line {number} has {len(row)} columns, expected at least {max(ti, li) + 1}",
                "quote fields that contain the delimiter",
            )
        texts.append(_text_value(path, number, row[ti]))
        labels.append(_label_value(path, number, row[li]))
        lines.append(number)
    return LabeledData(texts, labels, str(path), lines)


def _looks_like_header(first_row: list[str], text_column: str | None, label_column: str | None) -> bool:
    lowered = {c.lower() for c in first_row}
    named = [c for c in (text_column, label_column) if c is not None and not _is_int(c)]
    if named:
        return True  # the user named columns: the first row must be the header
    return bool(lowered & set(TEXT_NAMES)) or bool(lowered & set(LABEL_NAMES))


def _pick_column(path: Path, columns: list[str], given: str | None, names: tuple[str, ...], role: str) -> str:
    if given is not None:
        if given in columns:
            return given
        if _is_int(given) and 0 <= int(given) < len(columns):
            return columns[int(given)]
        raise DataError(
            f"{path} has no column {given!r}; columns found: {', '.join(columns)}",
            f"pass --{role}-column with one of those",
        )
    by_lower = {c.lower(): c for c in columns}
    for name in names:
        if name in by_lower:
            return by_lower[name]
    raise DataError(
        f"{path}: cannot tell which column is the {role}; columns found: {', '.join(columns)}",
        f"pass --{role}-column NAME",
    )


def _headerless_columns(path: Path, rows, text_column: str | None, label_column: str | None) -> tuple[int, int]:
    width = len(rows[0][1])
    if text_column is not None and label_column is not None:
        return int(text_column), int(label_column)
    if width != 2:
        raise DataError(
            f"{path} has no header row and {width} columns",
            "add a header (text,label) or pass --text-column and --label-column as 0-based indexes",
        )
    # Two columns without a header: the label column is the one with fewer distinct, shorter values.
    columns = [[row[i] for _, row in rows if len(row) > i] for i in range(2)]
    score = [(len(set(col)), sum(map(len, col))) for col in columns]
    li = 0 if score[0] < score[1] else 1
    return 1 - li, li


def _text_value(path: Path, number: int, value) -> str:
    if not isinstance(value, str):
        raise DataError(f"{path} line {number}: the text is {type(value).__name__}, not a string")
    if not value.strip():
        raise DataError(f"{path} line {number}: empty text", "remove the line or fill it in")
    return value


def _label_value(path: Path, number: int, value) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{path} line {number}: the label must be a string or an integer, got {value!r}")
    label = str(value).strip()
    if not label:
        raise DataError(f"{path} line {number}: empty label", "every example needs a label")
    return label


# ------------------------------------------------------------------------------------- splitting


def split_dev(data: LabeledData, *, fraction: float = 0.1, seed: int = 0) -> tuple[LabeledData, LabeledData]:
    """Stratified, seeded split; every class keeps at least one training example."""
    if not 0.0 < fraction < 1.0:
        raise DataError(f"dev fraction {fraction} must be between 0 and 1")
    rng = random.Random(seed)
    by_label: dict[str, list[int]] = {}
    for i, label in enumerate(data.labels):
        by_label.setdefault(label, []).append(i)
    train_idx, dev_idx = [], []
    for label in sorted(by_label):
        indices = by_label[label][:]
        rng.shuffle(indices)
        n_dev = min(len(indices) - 1, max(1, round(len(indices) * fraction))) if len(indices) > 1 else 0
        dev_idx += indices[:n_dev]
        train_idx += indices[n_dev:]
    return data.subset(sorted(train_idx)), data.subset(sorted(dev_idx))


def load_splits(
    train_path: str | Path,
    dev_path: str | Path | None = None,
    *,
    dev_fraction: float = 0.1,
    seed: int = 0,
    text_column: str | None = None,
    label_column: str | None = None,
) -> tuple[LabeledData, LabeledData, LabelMap]:
    """Training data, dev data (read, or cut from training) and the label map; all checks done."""
    train = read_labeled(train_path, text_column=text_column, label_column=label_column)
    counts = train.counts()
    if len(counts) < 2:
        only = next(iter(counts))
        raise DataError(
            f"{train.source} has one class only ({only!r}, {counts[only]} examples)",
            "a classifier needs examples of at least two labels",
        )
    label_map = LabelMap.from_data(train)
    if dev_path is not None:
        dev = read_labeled(dev_path, text_column=text_column, label_column=label_column)
        label_map.check_known(dev, "dev")
    else:
        train, dev = split_dev(train, fraction=dev_fraction, seed=seed)
    return train, dev, label_map


# -------------------------------------------------------------------------------------- batching


def bucketed_batches(
    lengths: np.ndarray, batch_size: int, *, shuffle: bool = True, seed: int = 0, epoch: int = 0, pool_batches: int = 50
) -> list[np.ndarray]:
    """Index batches of similar length (less padding); seeded and different each epoch when shuffled.

    Shuffles, sorts pools of `pool_batches` batches by length, cuts them, then shuffles batch order.
    """
    if batch_size < 1:
        raise DataError(f"batch size must be at least 1, got {batch_size}")
    n = len(lengths)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n) if shuffle else np.arange(n)
    pool = batch_size * pool_batches
    batches = []
    for start in range(0, n, pool):
        chunk = order[start : start + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def collate(
    ids: list[np.ndarray], *, pad_id: int, multiple: int = 8, max_width: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Pad to the batch's longest, rounded up to `multiple` (fewer distinct shapes to compile)."""
    longest = max(len(x) for x in ids)
    width = -(-longest // multiple) * multiple
    if max_width is not None:
        width = max(longest, min(width, max_width))
    input_ids = np.full((len(ids), width), pad_id, dtype=np.int32)
    mask = np.zeros((len(ids), width), dtype=np.int32)
    for row, x in enumerate(ids):
        input_ids[row, : len(x)] = x
        mask[row, : len(x)] = 1
    return input_ids, mask


def language_of(text: str) -> str:
    """ "zh" for a text with any CJK ideograph (mixed zh+en counts as zh), else "en": the two halves of
    the shipped data, reported apart so a strong half cannot hide a weak one."""
    return "zh" if any("\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf" for c in text) else "en"
