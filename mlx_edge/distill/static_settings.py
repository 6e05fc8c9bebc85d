"""The static student's defaults, written once. No heavy imports: `mlx-edge distill --help` reads them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StaticSettings:
    """What `--student static` trains with unless told otherwise (measured: benchmarks/static_student.py)."""

    dim: int = 32  # the table's width (PCA of the teacher's states): to-do dev 91.5-92.0% at 32, 92.2% at 64
    # teacher pieces beyond the data's (English ones for the English rows' share, the rest the likeliest: models/
    # prune.py): unseen words keep a row the teacher filled (to-do dev, all by score then: 89.3% with none, 92.2%
    # with 4000, 92.0% with 16000, at width 64; the demo's static bundle with the English share: 91.3% at 32)
    vocab_extra: int = 4000
    learning_rate: float = 5e-3  # a table learns at a far higher rate than a transformer
    epochs: int = 10  # the best dev epoch came at 5-9


STATIC = StaticSettings()
