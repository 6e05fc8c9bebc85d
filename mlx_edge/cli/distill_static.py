"""`mlx-edge distill --student static`: the options that apply, and the static student's own defaults.

`static_runner(ctx)` stands in for `distill.api.distill`, called with the same keyword arguments: it
refuses every option given on the command line that has nothing to act on in a token table (any
option not in `APPLIES`, so one added to `distill` later is refused until it is made to work here),
takes the static student's learning rate, epochs and extra pieces where the command line gave none
(a table learns at a far higher rate than a transformer, and an unseen word is best kept whole, in
a row the teacher filled), and calls `distill_static`. Imports only click at
module level.
"""

from __future__ import annotations

import click
from click.core import ParameterSource

# The distill command's parameters (click names) that mean something for a static student.
APPLIES = {
    "teacher_dir", "train_path", "dev_path", "targets_dir", "student", "static_dim", "vocab", "vocab_extra",
    "freeze_embeddings", "out", "epochs", "min_steps", "batch_size", "learning_rate", "max_length", "temperature",
    "calibrate", "kd_weight", "ce_weight", "warmup_ratio", "weight_decay", "grad_accum", "max_grad_norm", "patience",
    "checkpoint_every", "max_steps", "cpu_shards", "seed", "dev_fraction", "text_column", "label_column",
    "device", "force", "restart", "as_json", "quiet",
}  # fmt: skip
# Why some of the others do not apply (the rest: "it is not a transformer").
WHY = {
    "init": "its table always starts from the teacher's embeddings (model2vec style)",
    "init_layers": "it has no layers to copy",
    "embedding_size": "its table's width is --static-dim",
    "layer_map": "it has no layers to map",
    "hidden_weight": "it has no hidden states to match",
    "attention_weight": "it has no attention maps to match",
    "embedding_weight": "it has no embedding layer output to match",
    "attention_loss": "it has no attention maps",
    "two_stage": "it has no intermediate losses",
    "step_budget": "a token table learns slower than layers and runs all its --epochs",
}
# The library's arguments `distill_static` takes as they are (the rest are mapped or dropped below).
PASSED = (
    "teacher", "train", "out", "dev", "targets", "vocab", "vocab_extra", "max_length", "dev_fraction",
    "text_column", "label_column", "device", "force", "progress", "on_step", "on_epoch",
)  # fmt: skip


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)


def _flag(ctx: click.Context, name: str) -> str:
    option = next(p for p in ctx.command.params if p.name == name)
    return max(option.opts, key=len)


def static_runner(ctx: click.Context):
    """A `run(**distill's keyword arguments) -> DistillReport` for `--student static`; DistillError
    (exit 8, one line) for an option given on the command line that does not apply."""
    from mlx_edge.distill.static import distill_static, static_loop  # lazy: --help stays instant
    from mlx_edge.distill.static_settings import STATIC  # lazy: --help stays instant
    from mlx_edge.errors import DistillError  # lazy: --help stays instant

    for name in ctx.params:
        if name not in APPLIES and _given(ctx, name):
            why = WHY.get(name, "it is not a transformer")
            raise DistillError(f"{_flag(ctx, name)} does not apply to a static student: {why}", "drop it")

    def run(*, loop, freeze_embeddings, **kwargs):
        given = {field: getattr(loop, field) for field in ("learning_rate", "epochs") if _given(ctx, field)}
        passed = {k: kwargs[k] for k in PASSED if k in kwargs}
        if not _given(ctx, "vocab_extra"):
            passed["vocab_extra"] = STATIC.vocab_extra
        return distill_static(
            **passed,
            dim=ctx.params["static_dim"],
            freeze_table=freeze_embeddings,
            loop=static_loop(loop, **given),
        )

    return run
