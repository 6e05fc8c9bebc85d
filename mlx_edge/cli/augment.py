"""`mlx-edge augment`: synthetic examples from a local LLM, cleaned by the teacher. Imports only click."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mlx_edge.cli.augment_adapt import adapt
from mlx_edge.cli.options import FiniteFloatRange, echo_err, with_columns
from mlx_edge.settings import AUGMENT, AUGMENT_ANSWER_TOKENS, AUGMENT_LIST_TOKENS


def _class_list(ctx, param, value):
    if not value:
        return None
    classes = [c.strip() for c in value.split(",") if c.strip()]
    if not classes:
        raise click.BadParameter("give class names separated by commas, e.g. finance,health")
    return classes


class AugmentCommand(click.Command):
    """`augment`, and `augment adapt ...` when the first argument is `adapt`. A click group would
    need every `augment` option before a subcommand name and would change `augment`'s own usage."""

    commands = {"adapt": adapt}  # as a click.Group names them (the docs' command check reads it)

    def make_context(self, info_name, args, parent=None, **extra):
        if args and args[0] in self.commands:
            return self.commands[args[0]].make_context(f"{info_name} {args[0]}", args[1:], parent=parent, **extra)
        return super().make_context(info_name, args, parent=parent, **extra)


@click.command(cls=AugmentCommand)
@click.option(
    "--seeds",
    type=click.Path(path_type=Path),
    required=True,
    help="Labeled file of real examples (CSV/TSV/JSONL) that the new ones imitate.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help='JSONL file to write ({"text","label"} per line); FILE.manifest.json and FILE.state.json go next to it.',
)
@click.option("--per-class", type=click.IntRange(1), required=True, help="New examples wanted per class.")
@click.option(
    "--llm",
    default=None,
    help="An LLM: smollm2-135m-instruct (built in, offline, English), gemma3-270m (built in, offline, "
    "multilingual; a base model, which continues a list of each class's seeds), an mlx-lm model directory or a "
    "hub id. Omitted: token edits of the seeds, no LLM.",
)
@click.option(
    "--adapter",
    type=click.Path(path_type=Path),
    default=None,
    help="A LoRA adapter of --llm (the --out of `mlx-edge augment adapt`): the LLM writes in your domain.",
)
@click.option(
    "--classes",
    callback=_class_list,
    default=None,
    help="Comma-separated classes to augment (each needs seed examples); default: all in --seeds.",
)
@click.option(
    "--teacher",
    "teacher_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Trained teacher directory: drop examples it labels differently or doubts.",
)
@click.option(
    "--min-confidence",
    type=FiniteFloatRange(0, 1),
    default=AUGMENT.min_confidence,
    show_default=True,
    help="With --teacher: drop examples whose teacher confidence is below this.",
)
@click.option("--relabel", is_flag=True, help="With --teacher: keep disagreements under the teacher's label.")
@click.option(
    "--shots", type=click.IntRange(1), default=AUGMENT.shots, show_default=True, help="Seed examples shown per prompt."
)
@click.option(
    "--per-prompt",
    type=click.IntRange(1),
    default=AUGMENT.per_prompt,
    show_default=True,
    help="New examples asked for per prompt.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1),
    default=AUGMENT.batch_size,
    show_default=True,
    help="Prompts generated together per round (batched by mlx-lm).",
)
@click.option(
    "--max-rounds",
    type=click.IntRange(1),
    default=AUGMENT.max_rounds,
    show_default=True,
    help="Stop after this many rounds even if a class is short (raise it and re-run to continue).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    default=AUGMENT.max_tokens,
    help=f"Token limit per answer [default: {AUGMENT_ANSWER_TOKENS} for a chat model, {AUGMENT_LIST_TOKENS} for a "
    "base model, which continues a list of the seeds].",
)
@click.option(
    "--temperature",
    type=FiniteFloatRange(0),
    default=AUGMENT.temperature,
    show_default=True,
    help="Sampling temperature.",
)
@click.option(
    "--top-p", type=FiniteFloatRange(0, 1), default=AUGMENT.top_p, show_default=True, help="Nucleus sampling mass."
)
@click.option("--seed", type=int, default=AUGMENT.seed, show_default=True, help="Seed for shot choice and sampling.")
@click.option(
    "--near-duplicate",
    type=FiniteFloatRange(0, 1),
    default=AUGMENT.near_duplicate,
    show_default=True,
    help="Jaccard similarity (words, or character bigrams for Chinese) at which texts count as duplicates.",
)
@click.option(
    "--min-chars", type=click.IntRange(1), default=AUGMENT.min_chars, show_default=True, help="Drop shorter examples."
)
@click.option(
    "--max-chars", type=click.IntRange(1), default=AUGMENT.max_chars, show_default=True, help="Drop longer examples."
)
@with_columns
@click.option("--force", is_flag=True, help="Start over even if --out holds (part of) another run.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def augment(
    seeds,
    out,
    per_class,
    llm,
    adapter,
    classes,
    teacher_dir,
    min_confidence,
    relabel,
    shots,
    per_prompt,
    batch_size,
    max_rounds,
    max_tokens,
    temperature,
    top_p,
    seed,
    near_duplicate,
    min_chars,
    max_chars,
    text_column,
    label_column,
    force,
    as_json,
    quiet,
):
    """Grow a small labeled set: new examples per class from a local LLM (mlx-lm).

    Each prompt shows the LLM a few real seeds of one class and asks for new ones in the same
    language and style. Answers are parsed (lists, quotes, JSON), exact and near duplicates and
    seed copies dropped, and classes balanced to --per-class. With --teacher, examples the
    teacher labels differently or with less than --min-confidence are dropped. Output is
    appended round by round: re-running an interrupted command continues it. Without --llm,
    new examples are token edits (delete/swap/replace/insert) of the seeds. To teach the LLM your
    domain first, train a LoRA adapter on your rows with `mlx-edge augment adapt` (see
    `mlx-edge augment adapt --help`) and pass it with --adapter.

    \b
    Examples:
      mlx-edge augment --seeds train.jsonl --llm mlx-community/Qwen2.5-1.5B-Instruct-4bit \\
          --per-class 200 --teacher teacher --min-confidence 0.7 --out synthetic.jsonl
      mlx-edge augment --seeds train.jsonl --llm smollm2-135m-instruct --per-class 50 \\
          --teacher teacher --min-confidence 0.5 --out synthetic.jsonl
      mlx-edge augment --seeds train.csv --per-class 50 --teacher teacher --out edits.jsonl
      mlx-edge augment adapt --model smollm2-135m-instruct --data train.jsonl --out adapter
      mlx-edge augment --seeds train.jsonl --llm smollm2-135m-instruct --adapter adapter \\
          --per-class 50 --teacher teacher --out synthetic.jsonl
    """
    from mlx_edge.augment.api import augment as run_augment  # lazy: --help stays instant
    from mlx_edge.augment.report import format_details, format_report  # lazy: --help stays instant

    if llm is None:
        echo_err("no --llm given: making token edits of the seeds", quiet)
    result = run_augment(
        seeds=seeds,
        out=out,
        per_class=per_class,
        llm=llm,
        adapter=adapter,
        classes=classes,
        teacher=teacher_dir,
        min_confidence=min_confidence,
        relabel=relabel,
        shots=shots,
        per_prompt=per_prompt,
        batch_size=batch_size,
        max_rounds=max_rounds,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        near_duplicate=near_duplicate,
        min_chars=min_chars,
        max_chars=max_chars,
        text_column=text_column,
        label_column=label_column,
        force=force,
        progress=not quiet,
    )
    if as_json:
        click.echo(json.dumps(result.summary(), indent=2, ensure_ascii=False))
        return
    click.echo(format_report(result))
    if result.resumed and not result.new_examples:
        kept = sum(c.kept for c in result.classes.values())
        click.echo(
            f"{result.out} already holds {kept} examples from {result.rounds} rounds; nothing to do"
            f" (manifest {result.manifest})"
        )
        click.echo(format_details(result))
        for name in result.short:
            echo_err(f"warning: {name} has {result.classes[name].kept} of {per_class}: raise --max-rounds to continue")
        return
    resumed = " (resumed)" if result.resumed else ""
    click.echo(
        f"{result.new_examples} new examples written to {result.out}{resumed} in {result.rounds} rounds "
        f"({result.examples_per_second:.1f} examples/s); manifest {result.manifest}"
    )
    click.echo(format_details(result))
    for name in result.short:
        echo_err(
            f"warning: {name} has {result.classes[name].kept} of {per_class} after {result.rounds} rounds "
            f"(raise --max-rounds and re-run to continue, or lower --min-confidence)"
        )
