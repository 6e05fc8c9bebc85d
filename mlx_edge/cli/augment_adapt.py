"""`mlx-edge augment adapt`: a LoRA adapter that teaches the augment LLM your domain. Imports only click."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mlx_edge.cli.options import FiniteFloatRange, renamed, with_columns
from mlx_edge.settings import ADAPT


@click.command()
@click.option(
    "--model",
    required=True,
    help="The LLM augment uses: smollm2-135m-instruct (built in), an mlx-lm model directory or a hub id.",
)
@click.option(
    "--data",
    type=click.Path(path_type=Path),
    required=True,
    help="Labeled file (CSV/TSV/JSONL) of your domain: the answers the adapter learns to write.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Adapter directory to write (adapters.safetensors, adapter_config.json, adapt_report.json).",
)
@click.option("--rank", type=click.IntRange(1), default=ADAPT.rank, show_default=True, help="LoRA rank.")
@click.option("--epochs", type=click.IntRange(1), default=ADAPT.epochs, show_default=True, help="Passes over the rows.")
@click.option(
    "--batch-size", type=click.IntRange(1), default=ADAPT.batch_size, show_default=True, help="Prompts per step."
)
@click.option(
    "--learning-rate",
    type=FiniteFloatRange(0, min_open=True),
    default=ADAPT.learning_rate,
    show_default=True,
    help="Adam learning rate.",
)
@renamed("--lr", "--learning-rate")
@click.option(
    "--max-seq-length",
    type=click.IntRange(32),
    default=ADAPT.max_seq_length,
    show_default=True,
    help="Tokens per prompt and answer; longer ones show fewer examples or are split.",
)
@click.option(
    "--num-layers",
    type=click.IntRange(-1),
    default=ADAPT.num_layers,
    show_default=True,
    help="Adapt the last N transformer layers (-1: all), as mlx_lm.lora's --num-layers.",
)
@click.option("--seed", type=int, default=ADAPT.seed, show_default=True, help="Seed for prompts, LoRA init, batches.")
@with_columns
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def adapt(
    model,
    data,
    out,
    rank,
    epochs,
    batch_size,
    learning_rate,
    max_seq_length,
    num_layers,
    seed,
    text_column,
    label_column,
    force,
    as_json,
    quiet,
):
    """Teach the augment LLM your domain: a LoRA adapter trained by mlx-lm on your labeled rows.

    Each row becomes an answer to the very request `mlx-edge augment` makes ("write N new examples
    of the class X", shown a few real ones), so the adapted model writes your kind of sentences.
    The prompt is masked out of the loss. The adapter is mlx-lm's own format: pass it to
    `mlx-edge augment --adapter DIR` with the same --llm, or to `mlx_lm.load(MODEL, adapter_path=DIR)`.

    \b
    Examples:
      mlx-edge augment adapt --model smollm2-135m-instruct --data train.jsonl --out adapter
      mlx-edge augment adapt --model mlx-community/Qwen2.5-0.5B-Instruct-4bit --data train.jsonl \\
          --rank 8 --epochs 3 --batch-size 2 --out adapter
      mlx-edge augment --seeds train.jsonl --llm smollm2-135m-instruct --adapter adapter \\
          --per-class 50 --out synthetic.jsonl
    """
    from mlx_edge.augment.adapt import adapt as run_adapt  # lazy: --help stays instant

    result = run_adapt(
        model=model,
        data=data,
        out=out,
        rank=rank,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_seq_length=max_seq_length,
        num_layers=num_layers,
        seed=seed,
        text_column=text_column,
        label_column=label_column,
        progress=not quiet,
        force=force,
    )
    if as_json:
        click.echo(json.dumps(result.summary(), indent=2, ensure_ascii=False))
        return
    click.echo(format_result(result))


def format_result(result) -> str:
    """A few lines: where the adapter is, how the loss moved, speed and memory."""
    k = max(1, min(10, len(result.losses) // 5))  # one step's loss is noisy: means of the first and last k
    first = sum(loss for _, loss in result.losses[:k]) / k
    last = sum(loss for _, loss in result.losses[-k:]) / k
    lines = [
        f"adapter written to {result.out}: {result.steps} steps over {result.pairs} prompts from "
        f"{result.examples} rows in {result.seconds:.0f} s",
        f"training loss {first:.3f} -> {last:.3f} "
        + (f"(step 1 -> step {result.steps})" if k == 1 else f"(mean of the first and last {k} steps)"),
    ]
    if result.validation_loss is not None:
        before, after = result.validation_loss
        lines.append(f"validation loss {before:.3f} -> {after:.3f} on {result.validation_examples} held-out rows")
    lines.append(
        f"{result.tokens_per_second:.1f} answer tokens/s ({result.sequence_tokens_per_second:.1f} tokens/s with "
        f"the prompts); peak MLX memory {result.peak_memory_gb:.2f} GB"
    )
    if result.dropped_rows:
        lines.append(f"{result.dropped_rows} answer rows did not fit in --max-seq-length and were left out")
    lines.append(f"use it: mlx-edge augment --llm {result.model} --adapter {result.out} --seeds ... --out ...")
    return "\n".join(lines)
