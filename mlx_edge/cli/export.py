"""`mlx-edge export` and `mlx-edge check`: thin click layers over mlx_edge.export / mlx_edge.check.

Only click is imported at module level, so `mlx-edge --help` stays instant.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mlx_edge.cli.options import FiniteFloatRange, device_option, renamed
from mlx_edge.errors import CHECK_FAILED, MlxEdgeError
from mlx_edge.settings import EXPORT, ExportSettings

# Mirrors bridges.coreml_export's choices; repeated here so `--help` imports nothing but click.
PRECISIONS = ("fp16", "fp32")
COMPUTE_UNITS = ("CPU_AND_GPU", "ALL", "CPU_AND_NE", "CPU_ONLY")
MIN_TARGETS = ("iOS16", "iOS17", "iOS18")
QUANTIZE = ("none", "int8", "int8-block", "int4-block", "palettize")


def _extras(ctx, param, value):
    """`classifier,onnx` -> ("classifier", "onnx"); an empty value: none."""
    names = tuple(dict.fromkeys(v.strip() for v in (value or "").split(",") if v.strip()))
    unknown = [n for n in names if n not in ExportSettings.EXTRAS]
    if unknown:
        raise click.BadParameter(f"{unknown[0]!r} is not an extra: use {', '.join(ExportSettings.EXTRAS)}")
    return names


def _seq_len(ctx, param, value):
    """Validate --seq-len's form here (one clear line); the student's limit is checked by export."""

    if value is None:
        return None
    try:
        from bridges.coreml_export import parse_seq_len  # lazy: --help stays instant

        parse_seq_len(value)
    except MlxEdgeError as exc:
        raise click.BadParameter(exc.message.removeprefix(f"--seq-len {value!r}").lstrip(" :") or str(exc)) from None
    return value


@click.command()
@click.argument("student_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="Bundle directory to write.")
@click.option(
    "--seq-len",
    default=EXPORT.seq_len,
    callback=_seq_len,
    help="Encoder input length: fixed (128), a range (16-128) or enumerated lengths (32,64,128; iOS18). "
    "Default: the max length the student was distilled with, else 128.",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default=EXPORT.precision,
    show_default=True,
    help="Compute precision of the mlprograms.",
)
@click.option(
    "--compute-units",
    type=click.Choice(COMPUTE_UNITS),
    default=EXPORT.compute_units,
    show_default=True,
    help="Compute units recommended to the app (recorded in metadata and manifest).",
)
@click.option(
    "--min-target",
    type=click.Choice(MIN_TARGETS),
    default=EXPORT.min_target,
    show_default=True,
    help="Minimum deployment target of the mlprograms.",
)
@click.option(
    "--quantize",
    type=click.Choice(QUANTIZE),
    default=EXPORT.quantize,
    show_default=True,
    help="Weight compression (coremltools.optimize): int8 (linear, one scale per output channel); "
    "int8-block / int4-block (linear, one scale per block of at most --block-size input weights; needs "
    "--min-target iOS18); "
    "palettize (an n-bit palette). check holds each mode to its own tolerance (probabilities, top label).",
)
@click.option(
    "--block-size",
    type=click.IntRange(1, 4096),
    default=EXPORT.block_size,
    show_default=True,
    help="The most weights per scale with --quantize int8-block / int4-block: each weight takes the largest "
    "divisor of its input width up to it (a 312/1200 TinyBERT-4 student: 26 and 30 at 32, 52 and 60 at 64). "
    "A student quantized by `distill --quantize` needs its own block size here (the one it was trained with).",
)
@click.option(
    "--palettize-bits",
    type=click.Choice(["2", "4", "6", "8"]),
    default=str(EXPORT.palettize_bits),
    show_default=True,
    help="Bits per weight with --quantize palettize.",
)
@click.option(
    "--palettize-mode",
    type=click.Choice(["kmeans", "uniform"]),
    default=EXPORT.palettize_mode,
    show_default=True,
    help="How the palette is built (kmeans needs scikit-learn).",
)
@click.option(
    "--head-optimizer",
    type=click.Choice(["sgd", "adam"]),
    default=EXPORT.head_optimizer,
    show_default=True,
    help="On-device optimizer of the head (Adam keeps two more copies of the weights).",
)
@click.option(
    "--head-learning-rate",
    type=FiniteFloatRange(1e-5, 1.0),
    default=EXPORT.head_learning_rate,
    help="Head learning rate baked into Head.mlmodel (apps may override within 1e-5..1). Default: 0.05 over "
    "the mean squared norm of the student's embeddings on the check texts, so every student's head learns "
    "a correction at the same pace.",
)
@click.option(
    "--head-batch-size",
    type=click.Choice(["1", "2", "4", "8", "16", "32", "64"]),
    default=str(EXPORT.head_batch_size),
    show_default=True,
    help="Head mini-batch size baked into Head.mlmodel.",
)
@click.option(
    "--head-epochs",
    type=click.IntRange(1, 200),
    default=EXPORT.head_epochs,
    show_default=True,
    help="Head epochs baked into Head.mlmodel (apps may choose 1-200).",
)
@renamed("--optimizer", "--head-optimizer")
@renamed("--learning-rate", "--head-learning-rate")
@renamed("--batch-size", "--head-batch-size")
@renamed("--epochs", "--head-epochs")
@click.option("--author", default=EXPORT.author, help="Author recorded in the models' metadata.")
@click.option("--license", default=EXPORT.license, help="Licence recorded in the models' metadata.")
@click.option("--model-version", default=EXPORT.model_version, show_default=True, help="Version string of the models.")
@click.option("--description", default=EXPORT.description, help="Short description of the models.")
@click.option(
    "--n-texts",
    type=click.IntRange(1, 600),
    default=EXPORT.n_texts,
    show_default=True,
    help="Dev-set texts used for the parity checks run before the bundle is written.",
)
@renamed("--texts", "--n-texts")
@click.option(
    "--extras",
    default=",".join(EXPORT.extras),
    callback=_extras,
    metavar="LIST",
    help="Also write what the app does not load, comma-separated: classifier (Classifier.mlpackage, ids -> "
    "probabilities: the encoder's weights a second time), onnx (model.onnx, fp32), tokenizer-json (a "
    "SentencePiece student's tokenizer.json beside unigram_spec.json, which the app and `check` read). "
    "Default: none.",
)
@click.option("--allow-failed-checks", is_flag=True, help="Write the bundle even if a check fails (recorded).")
@click.option("--force", is_flag=True, help="Replace an existing bundle at --out.")
@device_option
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def export(
    student_dir,
    out_dir,
    seq_len,
    precision,
    compute_units,
    min_target,
    quantize,
    block_size,
    palettize_bits,
    palettize_mode,
    head_optimizer,
    head_learning_rate,
    head_batch_size,
    head_epochs,
    author,
    license,
    model_version,
    description,
    n_texts,
    extras,
    allow_failed_checks,
    force,
    device,
    quiet,
    as_json,
):
    """Export a student directory as a CoreML bundle with an updatable head.

    Writes what the app loads: Encoder.mlpackage (ids -> embedding, logits), Head.mlmodel
    (embedding -> probs, updatable with MLUpdateTask), the tokenizer files and manifest.json.
    --extras adds Classifier.mlpackage (ids -> probabilities), model.onnx and/or tokenizer.json. The bundle is
    checked before it is renamed into place: a failed export leaves nothing behind.

    \b
    Examples:
      mlx-edge export ./student --out ./bundle
      mlx-edge export ./student --out ./bundle-int8 --quantize int8 --seq-len 64
      mlx-edge export ./student --out ./bundle-int4 --quantize int4-block --min-target iOS18
      mlx-edge export ./student --out ./bundle --seq-len 16-128 --precision fp32 --force
      mlx-edge export ./student --out ./bundle --extras classifier,onnx
    """
    from mlx_edge.bundle.layout import sequence_lengths  # lazy: --help stays instant
    from mlx_edge.export import export_bundle  # lazy: --help stays instant

    result = export_bundle(
        student_dir=student_dir,
        out_dir=out_dir,
        seq_len=seq_len,
        precision=precision,
        compute_units=compute_units,
        min_target=min_target,
        quantize=quantize,
        block_size=block_size,
        palettize_bits=int(palettize_bits),
        palettize_mode=palettize_mode,
        head_optimizer=head_optimizer,
        head_learning_rate=head_learning_rate,
        head_batch_size=int(head_batch_size),
        head_epochs=head_epochs,
        author=author,
        license=license,
        model_version=model_version,
        description=description,
        force=force,
        n_texts=n_texts,
        allow_failed_checks=allow_failed_checks,
        device=device,
        extras=extras,
        progress=not quiet,
    )
    if as_json:
        click.echo(json.dumps(result.manifest, indent=2, ensure_ascii=False))
        return
    checks = result.manifest["checks"]["results"]
    failed = [c for c in checks if not c["ok"]]
    click.echo(
        f"wrote {result.bundle} in {result.seconds:.1f} s "
        f"({precision}, quantize {quantize}, seq-len {sequence_lengths(result.manifest)}, "
        f"{len(checks) - len(failed)}/{len(checks)} checks passed)"
    )
    for name, size in [*result.sizes.items(), ("bundle (all files)", result.total_bytes)]:
        click.echo(f"  {name:<22} {size / 1e6:9.2f} MB" if size >= 1e5 else f"  {name:<22} {size / 1e3:9.1f} kB")
    for c in failed:
        click.echo(f"  FAIL {c['name']}: {c['detail']}")


@click.command()
@click.argument("bundle_dir", type=click.Path(path_type=Path))
@click.option(
    "--student",
    "student_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="The student the bundle came from (default: the path in manifest.json).",
)
@click.option(
    "--n-texts",
    type=click.IntRange(1, 600),
    default=EXPORT.n_texts,
    show_default=True,
    help="Dev-set texts for the numeric alignment checks.",
)
@renamed("--texts", "--n-texts")
@device_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(bundle_dir, student_dir, n_texts, device, as_json):
    """Verify an export bundle without a Mac; exit 11 with a table of what failed.

    Names, shapes and dtypes against manifest.json; sha256 of every file; labels and vocabulary
    against what the models record; no path or link out of the bundle; the programs'
    weights against the student's; MLX vs PyTorch mirror vs ONNX Runtime (when the bundle has
    model.onnx) vs the mlprogram itself (run op by op in NumPy; on macOS also with
    MLModel.predict per compute unit); extreme inputs; the updatable head's spec and a
    simulated on-device SGD update. Extras the manifest names are checked; absent ones are not
    missed.

    \b
    Examples:
      mlx-edge check ./bundle
      mlx-edge check ./bundle --student ./student --json
    """
    from mlx_edge.check import check_bundle, format_report  # lazy: --help stays instant

    report = check_bundle(bundle_dir, student_dir=student_dir, n_texts=n_texts, device=device)
    click.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) if as_json else format_report(report))
    sys.exit(0 if report.ok else CHECK_FAILED)
