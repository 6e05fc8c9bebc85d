"""`mlx-edge data`."""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict
from pathlib import Path

import click

from mlx_edge.cli.options import FiniteFloatRange, with_columns
from mlx_edge.errors import DataWarning


@click.command()
@click.argument("train", type=click.Path(path_type=Path))
@click.option("--dev", type=click.Path(path_type=Path), default=None, help="Dev file; else a stratified split is cut.")
@click.option(
    "--dev-fraction",
    type=FiniteFloatRange(0.01, 0.5),
    default=0.1,
    show_default=True,
    help="Share of training data kept for dev when no --dev is given.",
)
@click.option(
    "--tokenizer",
    "tokenizer_dir",
    default=None,
    metavar="DIR|NAME",
    help="Model directory (or built-in teacher name, e.g. multilingual-e5-small) whose tokenizer measures "
    "token lengths (to choose --max-length) and the share of unknown tokens.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the dev split.")
@with_columns
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def data(train, dev, dev_fraction, tokenizer_dir, seed, text_column, label_column, as_json):
    """Read a labeled file the way training will, and summarize it.

    CSV, TSV (with or without header) and JSONL; text and label columns are found by common
    names (text/sentence/content/review, label/class/category) or given. TSV is split at every
    tab (quotes are part of the text). Fails with one line on anything training would fail on;
    says how many lines of each file became rows, and lists what reads but looks wrong
    (repeated texts, labels seen once, dev texts that are also in training).

    \b
    Examples:
      mlx-edge data train.csv --dev dev.csv
      mlx-edge data notes.tsv --text-column body --label-column tag --tokenizer ./teacher
    """
    from mlx_edge.data import load_splits  # lazy: --help stays instant

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        train_data, dev_data, label_map = load_splits(
            train, dev, dev_fraction=dev_fraction, seed=seed, text_column=text_column, label_column=label_column
        )
    for warning in caught:
        if not issubclass(warning.category, DataWarning):  # someone else's: shown as it would have been
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    summary = {
        "train": {"path": str(train), "examples": len(train_data), "counts": dict(train_data.counts())},
        "dev": {
            "path": str(dev) if dev else f"{dev_fraction:.0%} of train (seed {seed})",
            "examples": len(dev_data),
            "counts": dict(dev_data.counts()),
        },
        "labels": label_map.labels,
        # a file read twice (--dev the training file) warns twice: once is enough
        "warnings": list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, DataWarning))),
    }
    files = [train_data] + ([dev_data] if dev is not None else [])
    for split, part in zip(("train", "dev"), files):
        summary[split]["file"] = asdict(part.file_lines)
    if tokenizer_dir is not None:
        import numpy as np  # lazy: --help stays instant

        from mlx_edge.models.builtin import resolve_model  # lazy: --help stays instant
        from mlx_edge.models.tokenizer import (  # lazy: --help stays instant
            load_tokenizer,
            unknown_share,
            warn_unknown,
        )

        model_dir = Path(resolve_model(tokenizer_dir))
        tokenizer = load_tokenizer(model_dir)
        ids = tokenizer.encode_batch(train_data.texts, max_length=100_000)
        lengths = np.array([len(x) for x in ids])
        summary["tokens"] = {f"p{q}": int(np.percentile(lengths, q)) for q in (50, 90, 99, 100)}
        summary["tokens"]["model_limit"] = _position_limit(model_dir)
        share = unknown_share(ids, tokenizer.unk_id, tokenizer.special_ids)
        summary["tokens"]["unknown_share"] = share
        warn_unknown(share, f"{train}")
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return
    click.echo(f"labels ({len(label_map)}): {_first(label_map.labels)}")
    for part in files:
        click.echo(f"read {part.source}: {part.file_lines}")
    for split in ("train", "dev"):
        info = summary[split]
        counts = _first([f"{k} {info['counts'].get(k, 0)}" for k in label_map.labels])
        click.echo(f"{split:<5} {info['examples']:>6} examples  ({info['path']})\n      {counts}")
    if "tokens" in summary:
        t = summary["tokens"]
        suggest, limit = max(16, -(-t["p99"] // 8) * 8), t["model_limit"]
        advice = f"--max-length {suggest} covers 99%"
        if limit is not None and suggest > limit:
            share = float(np.mean(lengths > limit))
            advice = f"the model reads at most {limit} tokens (--max-length {limit}): {share:.1%} of examples are cut"
        click.echo(
            f"tokens per example: median {t['p50']}, p90 {t['p90']}, p99 {t['p99']}, max {t['p100']}  → {advice}"
        )
        click.echo(f"unknown tokens: {t['unknown_share']:.1%} of the training text's tokens")
    if summary["warnings"]:
        click.echo("looks wrong (training would still run):")
        for line in summary["warnings"]:
            click.echo(f"  - {line}")


def _position_limit(model_dir: Path) -> int | None:
    """The model's position count (config.json), the most tokens --max-length can ask for; None if unknown."""
    try:
        value = json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _first(items: list[str], shown: int = 30) -> str:
    """A list for one screen line: a file read with the wrong label column has hundreds of labels."""
    more = f", and {len(items) - shown} more (--json lists all)" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more
