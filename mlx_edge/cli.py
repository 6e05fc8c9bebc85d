"""The `mlx-edge` command line: parse, call the library, print. Nothing else lives here.

Heavy imports (mlx, torch, transformers) happen inside commands so `mlx-edge --help` is instant.
Only stages that are built are registered: there are no placeholder commands.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mlx_edge import __version__
from mlx_edge.errors import MlxEdgeError


class UserError(click.ClickException):
    """An MlxEdgeError shown as one line, with the error class's exit code."""

    def __init__(self, error: MlxEdgeError):
        super().__init__(str(error))
        self.exit_code = error.exit_code


class Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MlxEdgeError as error:
            raise UserError(error) from None


device_option = click.option(
    "--device", type=click.Choice(["auto", "cpu", "gpu", "cuda", "mps"]), default="auto", show_default=True,
    help="Where to compute: auto picks MLX GPU (Metal/CUDA) or PyTorch CUDA > MPS > CPU.")
column_options = [
    click.option("--text-column", default=None, help="Text column name (or 0-based index); found by name if omitted."),
    click.option("--label-column", default=None, help="Label column name (or index); found by name if omitted."),
]


def with_columns(func):
    for option in reversed(column_options):
        func = option(func)
    return func


def echo_err(message: str, quiet: bool = False) -> None:
    if not quiet:
        click.echo(message, err=True)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mlx-edge")
def main():
    """mlx-edge: labeled text → BERT teacher → small MLX student → updatable CoreML classifier.

    \b
    Start here:
      mlx-edge doctor              is this install usable, which devices and BLAS
      mlx-edge demo                the whole pipeline on the dataset mlx-edge ships
      mlx-edge data train.csv      check a labeled file before training
      mlx-edge run pipeline.toml   your data: teacher → student → checked CoreML bundle
    """


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(as_json):
    """Check versions against the tested set, devices, BLAS and CoreML support.

    Exits 0 when the install is usable; each mismatch comes with a one-line fix.

    \b
    Example:
      mlx-edge doctor --json
    """
    from mlx_edge.doctor import format_report, run_doctor

    report = run_doctor()
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else format_report(report))
    sys.exit(0 if report.usable else 1)


@main.command()
@click.argument("train", type=click.Path(path_type=Path))
@click.option("--dev", type=click.Path(path_type=Path), default=None, help="Dev file; else a stratified split is cut.")
@click.option("--dev-fraction", type=click.FloatRange(0.01, 0.5), default=0.1, show_default=True,
              help="Share of training data kept for dev when no --dev is given.")
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(path_type=Path), default=None,
              help="Model directory whose tokenizer measures token lengths (to choose --max-length).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the dev split.")
@with_columns
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def data(train, dev, dev_fraction, tokenizer_dir, seed, text_column, label_column, as_json):
    """Read a labeled file the way training will, and summarize it.

    CSV, TSV (with or without header) and JSONL; text and label columns are found by common
    names (text/sentence/content/review, label/class/category) or given. Fails with one line
    on anything training would fail on.

    \b
    Examples:
      mlx-edge data train.csv --dev dev.csv
      mlx-edge data notes.tsv --text-column body --label-column tag --tokenizer ./teacher
    """
    from mlx_edge.data import load_splits

    train_data, dev_data, label_map = load_splits(train, dev, dev_fraction=dev_fraction, seed=seed,
                                                  text_column=text_column, label_column=label_column)
    summary = {
        "train": {"path": str(train), "examples": len(train_data), "counts": dict(train_data.counts())},
        "dev": {"path": str(dev) if dev else f"{dev_fraction:.0%} of train (seed {seed})",
                "examples": len(dev_data), "counts": dict(dev_data.counts())},
        "labels": label_map.labels,
    }
    if tokenizer_dir is not None:
        import numpy as np

        from mlx_edge.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_dir)
        lengths = np.array([len(x) for x in tokenizer.encode_batch(train_data.texts, max_length=100_000)])
        summary["tokens"] = {f"p{q}": int(np.percentile(lengths, q)) for q in (50, 90, 99, 100)}
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return
    click.echo(f"labels ({len(label_map)}): {', '.join(label_map.labels)}")
    for split in ("train", "dev"):
        info = summary[split]
        counts = ", ".join(f"{k} {info['counts'].get(k, 0)}" for k in label_map.labels)
        click.echo(f"{split:<5} {info['examples']:>6} examples  ({info['path']})\n      {counts}")
    if "tokens" in summary:
        t = summary["tokens"]
        click.echo(f"tokens per example: median {t['p50']}, p90 {t['p90']}, p99 {t['p99']}, max {t['p100']}"
                   f"  → --max-length {max(16, -(-t['p99'] // 8) * 8)} covers 99%")


@main.command()
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.argument("texts", nargs=-1, required=True)
@click.option("--max-length", type=click.IntRange(8, 4096), default=128, show_default=True,
              help="Truncate texts to this many tokens.")
@click.option("--top-k", type=click.IntRange(1), default=3, show_default=True, help="Labels shown per text.")
@device_option
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON lines.")
def predict(model_dir, texts, max_length, top_k, device, as_json):
    """Labels and probabilities for TEXTS from a trained teacher or student directory.

    \b
    Example:
      mlx-edge predict ./student "Book a dentist appointment" "复习线性代数第三章"
    """
    from mlx_edge.predict import predict_texts

    results = predict_texts(model_dir, list(texts), max_length=max_length, device=device)
    for text, probs in zip(texts, results):
        ranked = sorted(probs.items(), key=lambda kv: -kv[1])[:top_k]
        if as_json:
            click.echo(json.dumps({"text": text, "label": ranked[0][0], "probabilities": probs}, ensure_ascii=False))
        else:
            shown = "  ".join(f"{label} {p:.3f}" for label, p in ranked)
            click.echo(f"{ranked[0][0]:<12} {shown}   {text}")


# Stage commands live in their own modules (cli_<stage>.py), which import `main` from here and
# register with @main.command()/@main.group(); they must import only click at module level.
# One import line per built stage, below.
from mlx_edge import cli_teacher  # noqa: E402,F401
from mlx_edge import cli_distill  # noqa: E402,F401
from mlx_edge import cli_export  # noqa: E402,F401
from mlx_edge import cli_run  # noqa: E402,F401
from mlx_edge import cli_augment  # noqa: E402,F401
from mlx_edge import cli_bench  # noqa: E402,F401
