"""The transfer set: text with no label that the student learns the teacher's function from.

Users have far more unlabeled text (notes, messages, tickets) than labels. `distill --unlabeled`
adds it to the training rows: the KD and intermediate losses run on every row, the cross-entropy
only on rows with a gold label (NO_LABEL marks the others). A transfer text equal to a dev or test
text is dropped with one warning line: the student would otherwise be chosen on text it was taught.

Files: one text per line (.txt and anything not below), or a column of a .csv/.tsv (the header names
it: `text_column`, else the first of data.TEXT_NAMES, else a one-column file is all text) or of a
.jsonl (`text_column`, else the first of TEXT_NAMES present, or one JSON string per line).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from mlx_edge.data import TEXT_NAMES, decode_text, quoted_rows, spanning_warning, tab_rows, text_lines
from mlx_edge.errors import DataError, DataWarning

NO_LABEL = -1  # a training row's label id when it has none: learned from the teacher alone


@dataclass(frozen=True)
class TransferSet:
    """The unlabeled texts a run adds, after dropping repeats, labeled rows and held-out texts."""

    texts: list[str]
    read: int  # non-blank texts in the files
    held_out: int  # dropped: equal to a dev or test text
    repeats: int  # dropped: a repeat of an earlier transfer text or of a labeled training row

    def summary(self) -> str:
        dropped = [(self.held_out, "equal to dev/test texts"), (self.repeats, "repeats or labeled rows")]
        said = ", ".join(f"{n} {why}" for n, why in dropped if n)
        return f"{len(self.texts)} unlabeled texts" + (f" ({said} dropped)" if said else "")


def normalized(text: str) -> str:
    """The form two texts are compared in: whitespace runs as one space, no outer spaces."""
    return " ".join(text.split())


def read_unlabeled(path: str | Path, *, text_column: str | None = None) -> list[str]:
    """The non-blank texts of one unlabeled file, in file order."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"unlabeled file {path} does not exist", "check the path")
    if path.is_dir():
        raise DataError(f"{path} is a directory, not an unlabeled file", "pass a .txt, .csv, .tsv or .jsonl file")
    raw = path.read_bytes()
    if b"\x00" in raw[:65536]:
        raise DataError(
            f"unlabeled file {path} is binary, not text", "pass a UTF-8 text file: one text per line, or a CSV/JSONL"
        )
    text = decode_text(path, raw)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        texts = _jsonl_texts(path, text, text_column)
    elif suffix in (".csv", ".tsv"):
        texts = _table_texts(path, text, "\t" if suffix == ".tsv" else ",", text_column)
    else:
        if text_column is not None:
            raise DataError(
                f"--unlabeled-column {text_column!r} given, but {path} is read as one text per line",
                "name a .csv, .tsv or .jsonl file, or drop the column",
            )
        texts = [line.strip() for line in text_lines(text)]
    texts = [t for t in texts if t]
    if not texts:
        raise DataError(f"unlabeled file {path} has no text", "it needs one text per line (or a filled text column)")
    return texts


def _jsonl_texts(path: Path, text: str, column: str | None) -> list[str]:
    out, key = [], column
    for number, line in enumerate(text_lines(text), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} line {number} is not JSON ({exc.msg})", "one JSON object per line") from None
        if isinstance(value, str) and column is None:
            out.append(value.strip())
            continue
        if not isinstance(value, dict):
            raise DataError(f"{path} line {number} is not a JSON object or string", "one JSON object per line")
        if key is None:
            key = next((k for k in value if k.lower() in TEXT_NAMES), None)
            if key is None:
                raise DataError(
                    f"{path} line {number} has no text field (looked for {', '.join(TEXT_NAMES)})",
                    "name it with --unlabeled-column",
                )
        field = value.get(key)
        if not isinstance(field, str):
            raise DataError(f"{path} line {number} has no string {key!r}", f"give every line a {key!r} text")
        out.append(field.strip())
    return out


def _table_texts(path: Path, text: str, delimiter: str, column: str | None) -> list[str]:
    """The text column of a CSV or TSV, its rows read as labeled files read them (data.py: TSV cut at
    every tab with quotes as text, CSV by the csv module's quote rules, rows that run over several lines
    warned about)."""
    rows, _ = tab_rows(text) if delimiter == "\t" else quoted_rows(path, text, delimiter)
    if not rows:
        return []
    header = [c.strip() for c in rows[0][2]]
    lowered = [c.lower() for c in header]
    if column is not None:
        if column not in header:
            raise DataError(f"{path} has no column {column!r} (columns: {', '.join(header)})", "check the name")
        index, body = header.index(column), rows[1:]
    else:
        index = next((lowered.index(n) for n in TEXT_NAMES if n in lowered), None)
        body = rows[1:]
        if index is None:
            if max(len(cells) for _, _, cells in rows) > 1:
                raise DataError(
                    f"{path} has no text column (looked for {', '.join(TEXT_NAMES)} in its header)",
                    "name it with --unlabeled-column, or give one text per line in a .txt file",
                )
            index, body = 0, rows  # one column, no header: every row is a text
    spanning = [(first, last) for first, last, _ in body if last > first]
    if spanning:
        warnings.warn(DataWarning(spanning_warning(path, spanning)), stacklevel=4)
    return [cells[index].strip() if index < len(cells) else "" for _, _, cells in body]


def transfer_set(
    files: list[Path], *, labeled: list[str], held_out: list[str], text_column: str | None = None
) -> TransferSet:
    """The texts of `files` to add to the training rows: each once, none equal to a labeled training
    text (already a row) or to a `held_out` (dev/test) text. Held-out matches are dropped with one
    warning line; files that leave nothing are refused."""
    seen = {normalized(t) for t in labeled}
    blocked = {normalized(t) for t in held_out}
    texts, read, held, repeats = [], 0, 0, 0
    for path in files:
        for text in read_unlabeled(path, text_column=text_column):
            read += 1
            key = normalized(text)
            if key in blocked:
                held += 1
            elif key in seen:
                repeats += 1
            else:
                seen.add(key)
                texts.append(text)
    names = ", ".join(str(p) for p in files)
    if not texts:
        raise DataError(
            f"no text of {names} is left for the transfer set: all {read} are dev/test texts or labeled rows",
            "pass text the dev and test files do not hold",
        )
    if held:
        warnings.warn(
            DataWarning(
                f"{held} of {read} unlabeled texts in {names} equal a dev or test text and were dropped "
                "(the student must not be chosen on text it was taught)"
            ),
            stacklevel=2,
        )
    return TransferSet(texts, read, held, repeats)
