"""`mlx-edge run` and `mlx-edge demo`. Imports only click at module level."""

from __future__ import annotations

from pathlib import Path

import click

from mlx_edge.cli.options import device_option, echo_err
from mlx_edge.errors import CHECK_FAILED, ConfigError
from mlx_edge.settings import BUNDLE_KINDS, DEMO_TEACHER, DISTILL, PIPELINE, TEACHER


def bundle_list(ctx, param, value) -> tuple[str, ...]:
    """A click callback: "fp16,int4" -> ("fp16", "int4"), each a bundle kind."""
    kinds = tuple(v.strip() for v in value.split(",") if v.strip())
    for kind in kinds:
        if kind not in BUNDLE_KINDS:
            raise click.BadParameter(f"{kind!r} is not a bundle kind: use any of {', '.join(BUNDLE_KINDS)}")
    if not kinds:
        raise click.BadParameter(f"name at least one bundle kind: {', '.join(BUNDLE_KINDS)}")
    return kinds


def _run(config, quiet: bool) -> None:
    from mlx_edge.pipeline import format_report, run_pipeline  # lazy: --help stays instant
    from mlx_edge.runtime.distributed import mlx_group  # lazy: --help stays instant

    if mlx_group() is not None:
        raise ConfigError(
            "the pipeline runs in one process (under mlx.launch every process would run every stage)",
            "run it without mlx.launch; `mlx.launch -- mlx-edge distill ...` spreads the distillation",
        )
    report = run_pipeline(config, progress=not quiet, log=lambda m: echo_err(m, quiet))
    click.echo(format_report(report))
    if report["check"] is not None and not report["check"]["ok"]:
        raise SystemExit(CHECK_FAILED)


@click.command()
@click.argument("config_path", metavar="CONFIG.toml", type=click.Path(path_type=Path))
@click.option("--quiet", is_flag=True, help="No progress output; print only the final report.")
def run(config_path, quiet):
    """Run the whole pipeline from a config file: teacher → (augment) → label → distill → bundles → check.

    Stages whose outputs are up to date (settings and input hashes unchanged) are skipped; an
    interrupted stage resumes. `mlx-edge init` writes a config with every setting and its default.

    \b
    Example:
      mlx-edge run examples/pipeline.toml
    """
    from mlx_edge.pipeline import PipelineConfig  # lazy: --help stays instant

    _run(PipelineConfig.from_toml(config_path), quiet)


@click.command()
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("mlx-edge-demo"),
    show_default=True,
    help="Workspace for every stage's output and report.json.",
)
@click.option(
    "--teacher",
    "teacher_dir",
    default=DEMO_TEACHER,
    show_default=True,
    metavar="DIR|NAME",
    help="Model to fine-tune as teacher: a directory or a built-in name (multilingual-e5-small, all-minilm-l6-v2).",
)
@click.option(
    "--limit",
    type=click.IntRange(20),
    default=None,
    help="Use a seeded sample of this many lines per split (a quick look: no transfer set is made).",
)
@click.option(
    "--teacher-epochs",
    type=click.IntRange(1),
    default=None,
    help=f"Teacher fine-tuning epochs, exactly; default: {TEACHER.epochs}, or more to reach {TEACHER.min_steps} "
    "steps on a small --limit.",
)
@click.option(
    "--distill-epochs",
    type=click.IntRange(1),
    default=None,
    help=f"Distillation epochs, exactly; default: {DISTILL.epochs}, or more to reach {DISTILL.min_steps} steps on a "
    "small --limit.",
)
@click.option(
    "--bundles",
    default=",".join(PIPELINE.bundles),
    show_default=True,
    callback=bundle_list,
    help="The bundles to make, comma-separated, from fp16, int8, int4, static (each checked; the report "
    "recommends one).",
)
@click.option(
    "--augment",
    "augment_per_class",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="First write N synthetic training examples per class with --augment-llm, cleaned by the teacher.",
)
@click.option(
    "--augment-llm",
    default=None,
    metavar="NAME|DIR|ID",
    help="The LLM for --augment: a built-in name (offline; default smollm2-135m-instruct), an mlx-lm "
    "directory or a hub id.",
)
@device_option
@click.option("--quiet", is_flag=True, help="No progress output; print only the final report.")
def demo(
    out, teacher_dir, limit, teacher_epochs, distill_epochs, bundles, augment_per_class, augment_llm, device, quiet
):
    """The whole pipeline, offline, on the dataset mlx-edge ships.

    Fine-tunes the multilingual-e5-small teacher (built in: Chinese and English) on the to-do
    set, distills a 4-layer student with a pruned vocabulary (soft labels, hidden states,
    attention), makes the bundle ladder (fp16, int8, int4 and static CoreML bundles with an
    updatable head), checks each, and reports the table and the bundle to ship. Re-running skips finished stages; an interrupted run resumes.

    \b
    Examples:
      mlx-edge demo --out /tmp/demo
      mlx-edge demo --teacher all-minilm-l6-v2 --limit 300
      mlx-edge demo --limit 300 --augment 50
    """
    from mlx_edge.demo import demo_config  # lazy: --help stays instant

    _run(
        demo_config(
            out=out,
            teacher=teacher_dir,
            limit=limit,
            device=device,
            teacher_epochs=teacher_epochs,
            teacher_exact=teacher_epochs is not None,
            distill_epochs=distill_epochs,
            distill_exact=distill_epochs is not None,
            bundles=bundles,
            augment=augment_per_class,
            augment_llm=augment_llm,
        ),
        quiet,
    )
