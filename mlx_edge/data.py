"""Labeled text: read CSV/TSV/JSONL, keep a label map, cut a dev split, tokenize, batch by length.

Everything here is NumPy and the `tokenizers` library: no PyTorch, no MLX, so every stage can use it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
import re
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np

from mlx_edge.datasets import WORDNET_EXAMPLES
from mlx_edge.errors import DataError, DataWarning

TEXT_NAMES = ("text", "sentence", "content", "review", "query", "utterance", "document", "sentence1")
LABEL_NAMES = ("label", "labels", "class", "category", "intent", "target", "y")
FORMATS = ("csv", "tsv", "jsonl")
FEW_ROWS = 10  # below this many rows, more labels than half the rows says the file is small, not that a column is wrong


@dataclass(frozen=True)
class FileLines:
    """What a file's lines became: `lines` = `rows` + `header` + `blank` + lines inside quoted fields."""

    lines: int
    rows: int = 0
    header: int = 0
    blank: int = 0

    def __str__(self) -> str:
        """E.g. "4 rows from 5 lines (1 header)"."""
        inside = self.lines - self.rows - self.header - self.blank
        parts = [(self.header, "header"), (self.blank, "blank"), (inside, "inside quoted fields")]
        said = ", ".join(f"{n} {name}" for n, name in parts if n)
        return f"{self.rows} rows from {self.lines} lines" + (f" ({said})" if said else "")


@dataclass
class LabeledData:
    """Texts with their labels as strings (ints in the file become "0", "1", ...)."""

    texts: list[str]
    labels: list[str]
    source: str = "<memory>"
    line_numbers: list[int] = field(default_factory=list)
    file_lines: FileLines | None = None  # the whole source file's, kept by subsets

    def __len__(self) -> int:
        return len(self.texts)

    def counts(self) -> Counter:
        return Counter(self.labels)

    def subset(self, indices) -> LabeledData:
        lines = [self.line_numbers[i] for i in indices] if self.line_numbers else []
        texts, labels = [self.texts[i] for i in indices], [self.labels[i] for i in indices]
        return LabeledData(texts, labels, self.source, lines, self.file_lines)


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
    # ASCII digits, one optional minus: isdigit() takes "²" and lstrip("-") takes "--5", which int() refuses
    return _INT.fullmatch(text) is not None


# ---------------------------------------------------------------------------------------- reading


def read_labeled(
    path: str | Path,
    *,
    text_column: str | None = None,
    label_column: str | None = None,
    file_format: str | None = None,
    tsv_quoted: bool = False,
) -> LabeledData:
    """Read a labeled file. Columns are given, or found by common names, or guessed for 2-column files.

    TSV is split at every tab and quotes are part of the text, unless `tsv_quoted` asks for CSV quote
    rules; CSV follows them. Every non-blank line becomes a row or an error that names it; rows that
    read but look wrong (duplicates, labels seen once, too many labels) each give a `DataWarning`.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"data file {path} does not exist", "check the path")
    if path.is_dir():
        raise DataError(f"{path} is a directory, not a data file", "pass a .csv, .tsv or .jsonl file")
    text = decode_text(path)
    if not text.strip():
        raise DataError(f"data file {path} is empty", "it needs one labeled example per line")
    fmt = file_format or _guess_format(path, text)
    if fmt == "jsonl":
        data = _read_jsonl(path, text, text_column, label_column)
    elif fmt == "tsv" and not tsv_quoted:
        data = _read_table(path, *tab_rows(text), "\t", text_column, label_column)
    elif fmt in ("csv", "tsv"):
        delimiter = "\t" if fmt == "tsv" else ","
        data = _read_table(path, *quoted_rows(path, text, delimiter), delimiter, text_column, label_column)
    else:
        raise DataError(f"unknown data format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if not data.texts:
        raise DataError(
            f"data file {path} is empty (a header but no labeled rows)", "it needs one labeled example per line"
        )
    _warn(data_warnings(data))
    return data


def decode_text(path: Path, raw: bytes | None = None) -> str:
    """A file's text (UTF-8, a BOM dropped), or one DataError that names the first line that is not."""
    raw = path.read_bytes() if raw is None else raw
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(
            f"{path} line {line} is not UTF-8 (byte 0x{raw[exc.start]:02x})",
            "save the file as UTF-8, e.g. iconv -f GBK -t UTF-8 in.csv > out.csv",
        ) from None


def text_lines(text: str) -> list[str]:
    """The file's lines, cut at "\n" only (a CRLF's "\r" dropped): str.splitlines also cuts at U+2028,
    form feeds and other separators that a text (or a JSON string) may hold."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _guess_format(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix == ".tsv":
        return "tsv"
    if suffix == ".csv":
        return "csv"
    first = next(line for line in text_lines(text) if line.strip())
    if first.lstrip().startswith("{"):
        return "jsonl"
    return "tsv" if "\t" in first else "csv"


def _read_jsonl(path: Path, text: str, text_column: str | None, label_column: str | None) -> LabeledData:
    texts, labels, numbers = [], [], []
    text_key = label_key = None
    lines = text_lines(text)
    for number, line in enumerate(lines, start=1):
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
        numbers.append(number)
    blank = len(lines) - len(numbers)
    return LabeledData(texts, labels, str(path), numbers, FileLines(len(lines), len(numbers), 0, blank))


# A row: its first line, its last line (later only when a quoted field holds line breaks), its fields.
Row = tuple[int, int, list[str]]


def tab_rows(text: str) -> tuple[list[Row], FileLines]:
    """TSV as most tools write it: fields split at every tab, no quoting (a quote is part of the text)."""
    lines = text_lines(text)
    rows = [(n, n, line.split("\t")) for n, line in enumerate(lines, start=1) if line.strip()]
    return rows, FileLines(len(lines), blank=len(lines) - len(rows))


def quoted_rows(path: Path, text: str, delimiter: str) -> tuple[list[Row], FileLines]:
    """CSV quote rules (the csv module): a quoted field may hold the delimiter, quotes and line breaks."""
    rows, blank, first = [], 0, 1
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    previous = csv.field_size_limit(csv_field_limit(len(text)))
    try:
        for cells in reader:
            if any(cell.strip() for cell in cells):
                rows.append((first, reader.line_num, cells))
            else:
                blank += reader.line_num - first + 1
            first = reader.line_num + 1
    except csv.Error as exc:
        raise DataError(f"{path} line {reader.line_num}: {exc}", "check the quotes on that line") from None
    finally:
        csv.field_size_limit(previous)
    return rows, FileLines(reader.line_num, blank=blank)


def csv_field_limit(size: int) -> int:
    # The csv module refuses fields over 131072 characters by default; a field is never longer than the file.
    # The limit is a C long: 2**31 - 1 is the most every platform takes (Windows' long is 32 bits).
    return max(csv.field_size_limit(), min(size + 1, 2**31 - 1))


def _read_table(
    path: Path, rows: list[Row], lines: FileLines, delimiter: str, text_column: str | None, label_column: str | None
) -> LabeledData:
    if not rows:
        raise DataError(f"data file {path} is empty", "it needs one labeled example per line")
    header = [cell.strip() for cell in rows[0][2]]
    if _looks_like_header(header, text_column, label_column):
        ti = header.index(_pick_column(path, header, text_column, TEXT_NAMES, "text"))
        li = header.index(_pick_column(path, header, label_column, LABEL_NAMES, "label"))
        body, lines = rows[1:], replace(lines, header=rows[0][1] - rows[0][0] + 1)
        _check_widths(path, body, len(header), "the header", delimiter)
    else:
        _check_widths(path, rows, len(header), "the first row", delimiter)
        ti, li = _headerless_columns(path, rows, text_column, label_column)
        body = rows
    texts = [_text_value(path, first, cells[ti]) for first, _, cells in body]
    labels = [_label_value(path, first, cells[li]) for first, _, cells in body]
    spanning = [(first, last) for first, last, _ in body if last > first]
    if spanning:
        _warn([spanning_warning(path, spanning)])
    return LabeledData(texts, labels, str(path), [first for first, _, _ in body], replace(lines, rows=len(body)))


def _check_widths(path: Path, rows: list[Row], width: int, reference: str, delimiter: str) -> None:
    """Every row has as many fields as `reference`, or one error names the rows that do not."""
    bad = [(first, last, len(cells)) for first, last, cells in rows if len(cells) != width]
    if not bad:
        return
    if delimiter == "\t":
        hint = (
            "TSV fields are cut at every tab and quotes are text: remove tabs inside texts, or fill in missing fields"
        )
    else:
        hint = 'quote a text that holds a comma ("like, this") and close every opened quote'
    if len(bad) == 1:
        first, last, count = bad[0]
        raise DataError(f"{path} {_where(first, last)} has {count} columns, {reference} has {width}", hint)
    shown = ", ".join(f"{_where(first, last)} has {count}" for first, last, count in bad[:5])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    raise DataError(f"{path}: {len(bad)} rows do not have the {width} columns {reference} has: {shown}{more}", hint)


def _where(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"line {first} (a quoted field running to line {last})"


def spanning_warning(path: Path, spanning: list[tuple[int, int]]) -> str:
    shown = ", ".join(f"lines {first}-{last}" for first, last in spanning[:5])
    return (
        f"{path}: {len(spanning)} rows run over several lines ({shown}): a quoted text with line breaks, "
        "or a quote opened and closed far later"
    )


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


def _headerless_columns(path: Path, rows: list[Row], text_column: str | None, label_column: str | None):
    width = len(rows[0][2])
    if text_column is not None and label_column is not None:
        indexes = int(text_column), int(label_column)
        if not all(0 <= i < width for i in indexes):
            raise DataError(
                f"{path} has {width} columns and no header: "
                f"column indexes {text_column}, {label_column} are out of range",
                f"pass --text-column and --label-column between 0 and {width - 1}",
            )
        return indexes
    if width != 2:
        raise DataError(
            f"{path} has no header row and {width} columns",
            "add a header (text,label) or pass --text-column and --label-column as 0-based indexes",
        )
    # Two columns without a header: the label column is the one with fewer distinct, shorter values.
    columns = [[cells[i] for _, _, cells in rows] for i in range(2)]
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


# ---------------------------------------------------------------------------------------- checks


def data_warnings(data: LabeledData) -> list[str]:
    """What looks wrong in rows that read fine, one line each: repeated texts (equal but for surrounding spaces),
    labels alike but for case, spaces, hyphens or underscores, too many labels, labels seen once."""
    where = data.source
    found = []
    first_row: dict[str, int] = {}
    repeats = []
    for i, text in enumerate(data.texts):
        key = text.strip()
        if key in first_row:
            repeats.append((i, first_row[key]))
        else:
            first_row[key] = i
    if repeats:
        i, j = repeats[0]
        other = sum(data.labels[i] != data.labels[j] for i, j in repeats)
        found.append(
            f"{where}: {_count(len(repeats), 'text repeats', 'texts repeat')} an earlier row, "
            f"{other} of them with another label "
            f"(e.g. {_line(data, i)} repeats {_line(data, j)}): repeats weigh double and can land in train and dev"
        )
    counts = data.counts()
    first: dict[str, int] = {}  # each label's first row, in first-seen order
    for i, label in enumerate(data.labels):
        first.setdefault(label, i)
    alike = _labels_alike(list(first))
    if alike:
        shown = "; ".join(
            " and ".join(f"{label!r} ({_line(data, first[label])})" for label in group) for group in alike[:3]
        )
        more = f" and {len(alike) - 3} more" if len(alike) > 3 else ""
        found.append(
            f"{where}: labels that differ only in case, spaces, hyphens or underscores: {shown}{more}: each is a class of "
            "its own; write them the same if they mean one"
        )
    once = [label for label, n in counts.items() if n == 1]
    if len(data) >= FEW_ROWS and len(counts) > len(data) / 2:
        if len(first_row) * 5 <= len(counts):  # few distinct texts, many distinct labels: the columns are crossed
            question = (
                f"the texts have only {len(first_row)} distinct values: the text and label columns look swapped "
                "(--text-column and --label-column name them)"
            )
        else:
            question = "is the label column the right one? (--label-column names it)"
        found.append(f"{where}: {len(counts)} distinct labels in {len(data)} rows ({len(once)} seen once): {question}")
    elif once:
        rows = {label: i for i, label in enumerate(data.labels)}
        shown = ", ".join(f"{label!r} ({_line(data, rows[label])})" for label in once[:5])
        more = f" and {len(once) - 5} more" if len(once) > 5 else ""
        said = "labels have" if len(once) > 1 else "label has"
        found.append(
            f"{where}: {len(once)} {said} one example only: {shown}{more}: too few to learn or to measure a class"
        )
    return found


def _labels_alike(labels: list[str]) -> list[list[str]]:
    """Groups of labels equal once case, spaces, hyphens and underscores are ignored (`Reminder`,
    `reminder`; `to-do`, `To Do`, `to_do`; not `1.0` and `10`), in first-seen order; [] when there are none."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        key = re.sub(r"[\s_\-]+", "", label.casefold())
        groups.setdefault(key or label, []).append(label)
    return [group for group in groups.values() if len(group) > 1]


def overlap_warning(train: LabeledData, dev: LabeledData) -> str | None:
    """One line when dev texts are also training texts (the dev score would flatter the model), else None."""
    train_rows = {}
    for i, text in enumerate(train.texts):
        train_rows.setdefault(text.strip(), i)
    shared = [(i, train_rows[t.strip()]) for i, t in enumerate(dev.texts) if t.strip() in train_rows]
    if not shared:
        return None
    i, j = shared[0]
    return (
        f"{len(shared)} of {len(dev)} dev texts in {dev.source} are also training texts in {train.source} "
        f"(e.g. dev {_line(dev, i)} is train {_line(train, j)}): the dev score will overstate the model"
    )


def warn_overlap(train: LabeledData, dev: LabeledData) -> None:
    """Warn (`DataWarning`) when a separately read dev file shares texts with training."""
    _warn([overlap_warning(train, dev)])


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _line(data: LabeledData, i: int) -> str:
    return f"line {data.line_numbers[i]}" if data.line_numbers else f"row {i + 1}"


def _warn(messages) -> None:
    for message in messages:
        if message:
            warnings.warn(DataWarning(message), stacklevel=3)


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
    tsv_quoted: bool = False,
) -> tuple[LabeledData, LabeledData, LabelMap]:
    """Training data, dev data (read, or cut from training) and the label map; all checks done."""
    columns = {"text_column": text_column, "label_column": label_column, "tsv_quoted": tsv_quoted}
    train = read_labeled(train_path, **columns)
    counts = train.counts()
    if len(counts) < 2:
        only = next(iter(counts))
        raise DataError(
            f"{train.source} has one class only ({only!r}, {counts[only]} examples)",
            "a classifier needs examples of at least two labels",
        )
    label_map = LabelMap.from_data(train)
    if dev_path is not None:
        dev = read_labeled(dev_path, **columns)
        label_map.check_known(dev, "dev")
        warn_overlap(train, dev)
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


def epochs_for(epochs: int, min_steps: int, steps_per_epoch: int, step_budget: int = 0, fewest: int = 1) -> int:
    """The epochs a run of `steps_per_epoch` optimizer steps an epoch trains: `epochs`, or the fewest that
    reach `min_steps` (a few hundred rows); or, when `epochs` would be more than `step_budget` steps (0: no
    budget), the whole number of epochs nearest it, never fewer than `fewest` nor more than `epochs`."""
    steps = max(1, steps_per_epoch)
    if min_steps > steps * epochs:
        return math.ceil(min_steps / steps)
    if step_budget and steps * epochs > step_budget:
        return min(epochs, max(fewest, round(step_budget / steps)))
    return epochs


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


IDEOGRAPHS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs: extension A, unified, compatibility
IDEOGRAPH = re.compile(f"[{IDEOGRAPHS}]")


def language_of(text: str) -> str:
    """ "zh" for a text with any CJK ideograph (mixed zh+en counts as zh), else "en": the two halves of
    the shipped data, reported apart so a strong half cannot hide a weak one."""
    return "zh" if IDEOGRAPH.search(text) else "en"


def is_latin(text: str) -> bool:
    """A text with Latin letters and no CJK ideograph."""
    return language_of(text) == "en" and any("a" <= c <= "z" for c in text.lower())


# a Latin-script word, accents kept (the Latin-1 and Latin Extended letters), with an English clitic ('s, 't)
LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]+(?:'[a-z]+)?")
# A set's Latin-script rows are English when at least ENGLISH_SHARE of their words (pooled) are among
# the ENGLISH_COMMON most frequent words of WordNet's example sentences. The shipped to-do set's English
# half scores 0.51, vader-sentiment's reviews 0.64; to-do items and reviews written in French, Spanish,
# German and Italian to test this 0.04-0.10 (their "pain", "pour", "la" are WordNet words too, so the
# whole vocabulary does not tell them apart: 0.20-0.33 against 0.84-0.91).
ENGLISH_COMMON = 1000
ENGLISH_SHARE = 0.2


@cache
def wordnet_words() -> Counter:
    """How often each word (lowercase, LATIN_WORD) occurs in WordNet's example sentences: broad English."""
    with open(WORDNET_EXAMPLES, encoding="utf-8") as lines:
        return Counter(word.lower() for line in lines for word in LATIN_WORD.findall(line))


@cache
def _common_english() -> frozenset[str]:
    return frozenset(word for word, _ in wordnet_words().most_common(ENGLISH_COMMON))


def english_rows(texts: Sequence[str]) -> int:
    """How many of `texts` are English, what broad English text (WordNet's sentences), English word bags
    and the English share of a pruned vocabulary serve: the rows with Latin letters and no CJK
    ideograph, all or none of them. None when their words, pooled, are too rarely common English ones
    (ENGLISH_SHARE): a French, Spanish or German set writes Latin letters too."""
    latin = [text for text in texts if is_latin(text)]
    words = [word.lower() for text in latin for word in LATIN_WORD.findall(text)]
    common = _common_english()
    if not words or sum(word in common for word in words) < ENGLISH_SHARE * len(words):
        return 0
    return len(latin)
