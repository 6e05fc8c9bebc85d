"""The static student's defaults, written once. No heavy imports: `mlx-edge distill --help` reads them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StaticSettings:
    """What `--student static` trains with unless told otherwise (measured: benchmarks/static_student.py)."""

    dim: int = 64  # the table's width (PCA of the teacher's states): 32-256 all gave ~90.5% on the to-do data
    learning_rate: float = 5e-3  # a table learns at a far higher rate than a transformer
    epochs: int = 10  # the best dev epoch came at 4-8


STATIC = StaticSettings()
