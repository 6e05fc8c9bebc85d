"""The vocabulary-pruning trade-off on the shipped to-do data: pieces kept, <unk> on unseen text, size.

    .venv/bin/python benchmarks/vocab_pruning.py [--teacher multilingual-e5-small] [--width 312]

Plans each `--vocab` mode (and `seen+script` with `--vocab-extra` pieces, chosen as distill chooses them,
and again all by the tokenizer's scores) from train.jsonl, tokenizes
dev+test (text the plan never saw) with the pruned tokenizer, and prints the share of <unk> tokens,
the share of the teacher's dev+test tokens the student lacks (words that split into smaller pieces
for it) and the fp16 size of the embedding table.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from mlx_edge.data import read_labeled
from mlx_edge.datasets import WORDNET_SENTENCES, broad_english, todo_split
from mlx_edge.models.builtin import resolve_model
from mlx_edge.models.prune import MODES, plan_vocab, write_pruned_tokenizer
from mlx_edge.models.tokenizer import load_tokenizer


def unknown_share(directory: Path, texts: list[str]) -> float:
    tokenizer = load_tokenizer(directory)
    rows = tokenizer.encode_batch(texts, max_length=512)
    tokens = sum(len(r) - 2 for r in rows)
    return sum(i == tokenizer.unk_id for r in rows for i in r) / max(tokens, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="multilingual-e5-small", help="Built-in name or model directory.")
    parser.add_argument("--width", type=int, default=312, help="Student width for the size column.")
    args = parser.parse_args()
    teacher = Path(resolve_model(args.teacher))
    train = read_labeled(todo_split("train")).texts
    unseen = read_labeled(todo_split("dev")).texts + read_labeled(todo_split("test")).texts
    full = [i for row in load_tokenizer(teacher).encode_batch(unseen, max_length=512) for i in row[1:-1]]
    print(
        f"| --vocab | pieces kept | <unk> on dev+test | teacher's dev+test tokens lacking | embeddings {args.width} wide fp16 |"
    )
    print("| --- | --- | --- | --- | --- |")
    english = broad_english(WORDNET_SENTENCES)  # what distill ranks the English rows' share of extra pieces by
    runs = [(mode, 0, True) for mode in MODES] + [("seen+script", extra, True) for extra in (4000, 8000, 16000)]
    runs += [("seen+script", extra, False) for extra in (4000, 8000)]  # every extra piece by the tokenizer's scores
    runs.sort(key=lambda run: (run[0] != "all", -run[1], not run[2], run[0] != "seen+chars", run[0] == "seen"))
    for mode, extra, by_use in runs:
        plan = plan_vocab(teacher, train, mode, extra, english if by_use else ())
        kept = set(plan.keep.tolist())
        lacking = sum(i not in kept for i in full) / len(full)
        with tempfile.TemporaryDirectory() as tmp:
            write_pruned_tokenizer(teacher, Path(tmp), plan)
            share = unknown_share(Path(tmp), unseen)
        name = mode + (f" --vocab-extra {extra}" if extra else "") + ("" if by_use or not extra else ", all by score")
        size = len(plan.keep) * args.width * 2 / 1e6
        print(f"| {name} | {len(plan.keep):,} | {share:.3%} | {lacking:.2%} | {size:.1f} MB |")


if __name__ == "__main__":
    main()
