"""The distillation loop's settings: the loss terms, their weight schedules, LoopConfig."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from mlx_edge.errors import DistillError
from mlx_edge.metrics import keeps_last
from mlx_edge.settings import DISTILL, DISTILL_LEARNING_RATE, DistillSettings

TERMS = ("kd", "ce", "hidden", "attention", "embedding")


@dataclass
class Schedule:
    """A loss weight: constant, or linear from `start` to `end` over the whole run."""

    start: float
    end: float | None = None

    def at(self, progress: float) -> float:
        return self.start if self.end is None else self.start + (self.end - self.start) * progress

    @property
    def ever_on(self) -> bool:
        return self.start > 0 or (self.end or 0) > 0

    @classmethod
    def parse(cls, text: str | float, name: str = "loss weight") -> Schedule:
        """`name` says which weight in errors (e.g. --kd-weight)."""
        if isinstance(text, (int, float)):
            text = str(text)
        parts = str(text).split(":")
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise DistillError(f"{name} {text!r} is not a number or 'start:end'") from None
        if len(values) not in (1, 2) or not all(math.isfinite(v) and v >= 0 for v in values):
            raise DistillError(f"{name} {text!r}: use W (constant) or START:END (linear), finite and non-negative")
        return cls(values[0], values[1] if len(values) == 2 else None)


def default_weights(s: DistillSettings) -> dict[str, Schedule]:
    """Each term's weight schedule from the settings' `<term>_weight` strings."""
    return {k: Schedule.parse(getattr(s, f"{k}_weight"), f"--{k}-weight") for k in TERMS}


@dataclass
class LoopConfig:
    """The loop's settings; defaults are DistillSettings' (mlx_edge/settings.py), read by `from_settings`."""

    epochs: int = DISTILL.epochs
    # more epochs than `epochs` when they are too few steps (run_loop). 0 here, not DistillSettings': a
    # library caller's LoopConfig runs its epochs exactly; the CLI and the pipeline pass [distill] min_steps
    min_steps: int = 0
    # fewer epochs than `epochs` when they are more steps than this (run_loop); 0 here, as min_steps
    step_budget: int = 0
    batch_size: int = DISTILL.batch_size
    learning_rate: float = DISTILL_LEARNING_RATE
    warmup_ratio: float = DISTILL.warmup_ratio
    weight_decay: float = DISTILL.weight_decay
    grad_accum: int = DISTILL.grad_accum
    max_grad_norm: float = DISTILL.max_grad_norm
    seed: int = DISTILL.seed
    temperature: float = DISTILL.temperature
    calibrate: bool = DISTILL.calibrate  # soften an over-confident teacher's soft labels (distill/api.py)
    weights: dict[str, Schedule] = field(default_factory=lambda: default_weights(DISTILL))
    attention_loss: str = DISTILL.attention_loss
    two_stage_epochs: int = DISTILL.two_stage  # TinyBERT: this many epochs of intermediate losses only
    patience: int | None = DISTILL.patience
    checkpoint_every: int = DISTILL.checkpoint_every
    max_steps: int | None = DISTILL.max_steps  # stop after this many optimizer steps (a trial, a benchmark)
    cpu_shards: int | None = DISTILL.cpu_shards  # CPU streams a step is split across; None: auto
    # the epoch kept: "best" on dev, "last", or "auto" (distill resolves it by the dev split's size:
    # metrics.keeps_last); the loop reads "best" or "last"
    select: str = DISTILL.select

    def __post_init__(self):
        on = {k for k, w in self.weights.items() if w.ever_on}
        if not on & {"kd", "ce"}:
            raise DistillError(
                "every prediction loss weight is 0 (--kd-weight, --ce-weight): the student's classifier "
                "would never learn the labels",
                "give --kd-weight (soft targets) or --ce-weight (hard labels) a weight above 0",
            )
        if self.two_stage_epochs and not on - {"kd", "ce"}:
            raise DistillError(
                f"--two-stage {self.two_stage_epochs} trains only the intermediate losses first, and all of "
                "their weights are 0 (--hidden-weight, --attention-weight, --embedding-weight)",
                "give one of them a weight above 0, or drop --two-stage",
            )
        if self.select not in DistillSettings.CHOICES["select"]:
            raise DistillError(f"select {self.select!r} is not auto, best or last", "use one of those")
        if self.select == "last" and self.patience is not None:
            raise DistillError(
                f"--patience {self.patience} stops on dev gains, and --select last keeps the last epoch "
                "whatever dev says",
                "drop --patience, or use --select best",
            )
        if self.two_stage_epochs >= self.epochs:
            raise DistillError(
                f"--two-stage {self.two_stage_epochs} leaves none of the {self.epochs} epochs to the "
                "prediction losses: the classifier would never learn the labels",
                f"use --two-stage below --epochs ({self.epochs})",
            )

    @classmethod
    def from_settings(cls, s: DistillSettings) -> LoopConfig:
        return cls(
            **s.kwargs(
                "epochs",
                "min_steps",
                "batch_size",
                "warmup_ratio",
                "weight_decay",
                "grad_accum",
                "max_grad_norm",
                "seed",
                "temperature",
                "calibrate",
                "attention_loss",
                "patience",
                "select",
                "checkpoint_every",
                "max_steps",
                "cpu_shards",
            ),
            weights=default_weights(s),
            two_stage_epochs=s.two_stage,
            step_budget=s.step_budget or 0,  # None: no cut (the pipeline sets one for teacher edits)
            learning_rate=DISTILL_LEARNING_RATE if s.learning_rate is None else s.learning_rate,
        )

    def weights_at(self, epoch: int, progress: float) -> dict[str, float]:
        w = {k: self.weights.get(k, Schedule(0.0)).at(progress) for k in TERMS}
        if self.two_stage_epochs:
            intermediate = epoch < self.two_stage_epochs
            for k in TERMS:
                if (k in ("kd", "ce")) == intermediate:
                    w[k] = 0.0
        return w


def with_select(loop: LoopConfig, dev_rows: int) -> LoopConfig:
    """`loop` with select "auto" decided for a dev split of `dev_rows` rows: the last epoch on a small
    split (metrics.keeps_last: the best of 10 or 30 dev rows is whichever epoch the noise favours), the
    best on dev on a larger one, or when --patience stops on dev gains."""
    if loop.select != "auto":
        return loop
    last = loop.patience is None and keeps_last("auto", dev_rows)
    return replace(loop, select="last" if last else "best")
