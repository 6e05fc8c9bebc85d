"""The vocabulary-pruning trade-off on the shipped to-do data: pieces kept, <unk> on unseen text, size.

    .venv/bin/python benchmarks/vocab_pruning.py [--teacher multilingual-e5-small] [--width 312]

Plans each `--vocab` mode from train.jsonl, tokenizes dev+test (text the plan never saw) with the
pruned tokenizer, and prints the share of <unk> tokens and the fp16 size of the embedding table.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from mlx_edge.data import read_labeled
from mlx_edge.datasets import todo_split
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
    print(f"| --vocab | pieces kept | <unk> on dev+test | embeddings {args.width} wide fp16 |")
    print("| --- | --- | --- | --- |")
    for mode in reversed(MODES):
        plan = plan_vocab(teacher, train, mode)
        with tempfile.TemporaryDirectory() as tmp:
            write_pruned_tokenizer(teacher, Path(tmp), plan)
            share = unknown_share(Path(tmp), unseen)
        print(f"| {mode} | {len(plan.keep):,} | {share:.3%} | {len(plan.keep) * args.width * 2 / 1e6:.1f} MB |")


if __name__ == "__main__":
    main()
