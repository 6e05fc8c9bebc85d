"""The README's "Choose a bundle" table: student kind x precision -> size, accuracy, agreement, CPU latency.

    .venv/bin/python benchmarks/bundle_table.py --teacher TEACHER [--dev DEV] STUDENT:BUNDLE [STUDENT:BUNDLE ...]

Each pair is a student directory and the bundle `mlx-edge export` made from it (fp16, int8-block,
a quantization-aware int4 student, the static student...). Accuracy is on the dev file (default: the
shipped to-do dev split), agreement with TEACHER's predictions there; latency per sentence at the
bundle's input length, batch 1, median of 64 dev texts, for the MLX student and the exported
program's PyTorch mirror (mlx_edge/bundle/table.py). Prints a plain table and the Markdown one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx_edge  # noqa: E402,F401  (preloads OpenBLAS before mlx)
from mlx_edge.bundle.table import bundle_row, format_rows  # noqa: E402
from mlx_edge.data import LabelMap, read_labeled  # noqa: E402
from mlx_edge.predict import predict_texts  # noqa: E402

DEV = Path(__file__).resolve().parents[1] / "mlx_edge" / "datasets" / "todo" / "dev.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", type=Path, required=True, help="the teacher the students were distilled from")
    parser.add_argument("--dev", type=Path, default=DEV, help="labeled dev file")
    parser.add_argument("pairs", nargs="+", help="STUDENT_DIR:BUNDLE_DIR")
    args = parser.parse_args()
    dev = read_labeled(args.dev)
    probs = predict_texts(args.teacher, dev.texts, max_length=128).probabilities
    labels = LabelMap(list(probs[0]))
    teacher_pred = labels.encode([max(p, key=p.get) for p in probs])
    gold = labels.encode(dev.labels)
    print(f"teacher dev accuracy {(teacher_pred == gold).mean():.1%} ({args.teacher})", file=sys.stderr)
    rows = []
    for pair in args.pairs:
        student, _, bundle = pair.partition(":")
        rows.append(bundle_row(Path(student), Path(bundle), dev.texts, gold, teacher_pred))
        print(f"measured {bundle}", file=sys.stderr)
    print(format_rows(rows))
    print()
    print(format_rows(rows, markdown=True))


if __name__ == "__main__":
    main()
