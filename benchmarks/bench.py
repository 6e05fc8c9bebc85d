"""docs/performance.md's backend table: `mlx-edge bench` on the tiny student, with its JSON and PNG kept.

    .venv/bin/python benchmarks/bench.py [--model tiny] [--out benchmarks/results] [mlx-edge bench options...]

Writes OUT/bench-MODEL.json, OUT/bench-MODEL.png and OUT/bench-MODEL.txt (the printed table);
any further options go to `mlx-edge bench` unchanged (e.g. --backends mlx,torch --threads 1).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny | small | base | an HF BERT directory")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="directory for the outputs")
    args, rest = parser.parse_known_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"bench-{Path(args.model).name}"
    command = ["bench", "--model", args.model, "--json", f"{stem}.json", "--plot", f"{stem}.png", *rest]
    print("mlx-edge " + " ".join(command), file=sys.stderr)
    # progress goes straight to stderr; the table is kept next to the JSON and the PNG
    result = subprocess.run([sys.executable, "-m", "mlx_edge", *command], stdout=subprocess.PIPE, text=True)
    stem.with_suffix(".txt").write_text(result.stdout)
    sys.stdout.write(result.stdout)
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
