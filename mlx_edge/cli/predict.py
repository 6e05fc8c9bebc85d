"""`mlx-edge predict`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mlx_edge.cli.options import device_option


@click.command()
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.argument("texts", nargs=-1, required=True)
@click.option(
    "--max-length",
    type=click.IntRange(8, 4096),
    default=128,
    show_default=True,
    help="Truncate texts to this many tokens.",
)
@click.option("--top-k", type=click.IntRange(1), default=3, show_default=True, help="Labels shown per text.")
@device_option
@click.option(
    "--backend",
    type=click.Choice(["auto", "mlx", "onnx"]),
    default="auto",
    show_default=True,
    help="Who computes: MLX, or ONNX Runtime on the model's exported program (CPU only; exported on first "
    "use, then cached). auto: MLX, which loads and answers a call soonest.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print results as JSON lines, each with its whole text (the table shows 80 characters of each, on one line).",
)
def predict(model_dir, texts, max_length, top_k, device, backend, as_json):
    """Labels and probabilities for TEXTS from a trained teacher or student directory.

    The backend that answered is named on stderr (and in each JSON line).

    \b
    Examples:
      mlx-edge predict ./student "Book a dentist appointment" "复习线性代数第三章"
      mlx-edge predict ./student "Book a dentist appointment" --backend onnx --json
    """
    from mlx_edge.predict import predict_texts  # lazy: --help stays instant

    result = predict_texts(model_dir, list(texts), max_length=max_length, device=device, backend=backend)
    click.echo(f"answered by {result.backend} ({result.why})", err=True)
    width = max([12, *(len(label) for probs in result.probabilities for label in probs)])
    for text, probs in zip(texts, result.probabilities):
        ranked = sorted(probs.items(), key=lambda kv: -kv[1])[:top_k]
        if as_json:
            line = {"text": text, "label": ranked[0][0], "probabilities": probs, "backend": result.backend}
            click.echo(json.dumps(line, ensure_ascii=False))
        else:
            shown = "  ".join(f"{label} {p:.3f}" for label, p in ranked)
            click.echo(f"{ranked[0][0]:<{width}} {shown}   {_one_line(text)}")


SHOWN_TEXT = 80  # characters of each text the table echoes (--json gives it whole)


def _one_line(text: str) -> str:
    """`text` on one line, spaces and line breaks collapsed, cut to SHOWN_TEXT characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= SHOWN_TEXT else flat[: SHOWN_TEXT - 1] + "…"
