"""`mlx-edge distill`. Imports only click at module level."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from mlx_edge.cli.options import (
    FiniteFloatRange,
    device_option,
    echo_err,
    layer_list,
    optimizer_options,
    renamed,
    select_option,
    with_columns,
    with_unlabeled,
)
from mlx_edge.distill.static_settings import STATIC
from mlx_edge.errors import ConfigError
from mlx_edge.settings import (
    BROAD_STEP_BUDGET,
    DISTILL,
    DISTILL_LEARNING_RATE,
    EDITS_LEARNING_RATE,
    EDITS_STEP_BUDGET,
    NEW_STUDENT_VOCAB_EXTRA,
    DistillSettings,
)


@click.command()
@click.option(
    "--teacher",
    "teacher_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Trained teacher directory (BERT architecture; it runs in MLX).",
)
@click.option("--train", "train_path", type=click.Path(path_type=Path), required=True, help="Labeled training file.")
@click.option(
    "--dev",
    "dev_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Labeled dev file, on which the best epoch is chosen; default: the teacher's dev file (or its split "
    "of this --train) as its manifest records it, else a stratified split of --train.",
)
@click.option(
    "--targets",
    "targets_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Targets cache from `teacher label`; without it the teacher runs live in MLX.",
)
@click.option(
    "--student",
    default=DISTILL.student,
    show_default=True,
    help="auto (4 layers cut from the teacher, widths 32 and its heads divide, at most 288 wide: the "
    "shape the int4 bundle needs), a preset (tiny, small, small-512, half), a BERT config .json, a student "
    "directory to continue, or "
    "static: a token table from the teacher's embeddings, mean-pooled (model2vec style; its own defaults: "
    f"--vocab-extra {STATIC.vocab_extra} --learning-rate {STATIC.learning_rate:g} --epochs {STATIC.epochs} unless given; "
    "no layers, so kd/ce losses only).",
)
@click.option(
    "--static-dim",
    type=click.IntRange(2, 4096),
    default=STATIC.dim,
    show_default=True,
    help="--student static: the table's width (PCA of the teacher's states); the embedding the head takes.",
)
@click.option(
    "--init",
    type=click.Choice(["auto", "teacher", "embeddings", "random"]),
    default=DISTILL.init,
    show_default=True,
    help="auto: teacher when the student's shape allows it (the teacher's head count, no wider parts), "
    "else embeddings (random for a student wider than the teacher); random; embeddings: the teacher's word embeddings (PCA to a narrower student's width), the rest "
    "random; teacher: embeddings and a subset of teacher layers, cut to a narrower student's widths by "
    "activation on the training data (its head count must match).",
)
@click.option(
    "--vocab",
    type=click.Choice(["auto", "seen", "seen+chars", "seen+script", "all"]),
    default=DISTILL.vocab,
    show_default=True,
    help="The student's vocabulary: the pieces the training data uses (seen), plus every single-character "
    "piece (seen+chars) or those of the scripts the data uses (seen+script; what auto means for a new "
    "student), or the teacher's whole vocabulary (all).",
)
@click.option(
    "--vocab-extra",
    type=click.IntRange(0),
    default=DISTILL.vocab_extra,
    help="Also keep this many more of the teacher's pieces in the data's scripts, so words the training data never "
    "showed keep their own embedding: for the English rows' share, the pieces English text (WordNet's example "
    "sentences) uses most, the rest the likeliest (Unigram scores); each costs one row of the student's width. "
    f"Default: {NEW_STUDENT_VOCAB_EXTRA} for a new student, none for one continued (it keeps its vocabulary).",
)
@click.option(
    "--freeze-embeddings",
    is_flag=True,
    help="Keep the word-embedding table as --init made it (the teacher's rows): pieces the training data "
    "never shows, such as --vocab-extra's, stay in the same space as the rest.",
)
@click.option(
    "--embedding-size",
    type=click.IntRange(1),
    default=DISTILL.embedding_size,
    help="Factorize the word embeddings (ALBERT/MobileBERT): a row of this width per piece and one "
    "projection up to the hidden width, split from the table by an SVD weighted by how often the "
    "training data uses each piece. Shrinks a pruned vocabulary's table several times; with --student "
    "DIR it splits a distilled student's table (then fine-tune 2-3 epochs).",
)
@click.option(
    "--quantize",
    type=click.Choice(["int8", "int4"]),
    default=DISTILL.quantize,
    help="Quantization-aware distillation: train with the encoder's weights and word embeddings quantized "
    "in blocks of --block-size as the app will hold them (export with --quantize int8-block/int4-block); "
    "the student is saved quantized. With --student DIR it fine-tunes a distilled student (1-3 epochs).",
)
@click.option(
    "--block-size",
    type=click.IntRange(1),
    default=DISTILL.block_size,
    show_default=True,
    help="Weights per scale with --quantize (32, 64 or 128; it must divide the student's widths).",
)
@click.option("--init-layers", callback=layer_list, default="", help="Teacher layers to copy (0-based), e.g. 1,3,5.")
@click.option(
    "--layer-map",
    default=DISTILL.layer_map,
    help="Student:teacher layer pairs (0-based), e.g. 0:2,1:5; default uniform.",
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Directory to write the student to.")
@click.option(
    "--epochs", type=click.IntRange(1), default=DISTILL.epochs, show_default=True, help="Passes over the data."
)
@click.option(
    "--min-steps",
    type=click.IntRange(0),
    default=DISTILL.min_steps,
    show_default=True,
    help="At least this many optimizer steps: a few hundred rows run more epochs than --epochs (0: exactly --epochs).",
)
@click.option(
    "--step-budget",
    type=click.IntRange(0),
    default=DISTILL.step_budget,
    help="At most about this many optimizer steps: a large transfer set runs fewer epochs than --epochs "
    "(whole epochs, at least 1). Worth it for teacher edits (near-copies of your rows, learned in a few "
    f"epochs; `mlx-edge run` uses {EDITS_STEP_BUDGET} for them) and broad text alone ({BROAD_STEP_BUDGET}), not for "
    "real unlabeled text.  [default: no cut]",
)
@click.option(
    "--batch-size", type=click.IntRange(1), default=DISTILL.batch_size, show_default=True, help="Examples per step."
)
@click.option(
    "--learning-rate",
    type=FiniteFloatRange(0, min_open=True),
    default=DISTILL.learning_rate,
    help=f"Peak learning rate (AdamW, warmup then linear decay); `mlx-edge run` uses {EDITS_LEARNING_RATE:g} for a "
    "transfer set of teacher edits when its teacher is blended toward its probe (a few dozen labels).  "
    f"[default: {DISTILL_LEARNING_RATE:g}]",
)
@renamed("--lr", "--learning-rate")
@click.option(
    "--max-length",
    type=click.IntRange(8, 4096),
    default=DISTILL.max_length,
    help="Token limit; default: the cache's, else the teacher's.",
)
@click.option(
    "--temperature",
    type=FiniteFloatRange(0, min_open=True),
    default=DISTILL.temperature,
    show_default=True,
    help="Soft-target temperature T (the KD term is multiplied by T²).",
)
@click.option(
    "--calibrate/--no-calibrate",
    default=DISTILL.calibrate,
    show_default=True,
    help="Soften an over-confident teacher's soft labels before the student learns them: its logits divided by "
    "the temperature at which its mean top probability on the training rows equals its dev accuracy.",
)
@click.option(
    "--kd-weight", default=DISTILL.kd_weight, show_default=True, help="Soft-target KL weight: W or START:END (linear)."
)
@click.option("--ce-weight", default=DISTILL.ce_weight, show_default=True, help="Hard-label cross-entropy weight.")
@click.option(
    "--hidden-weight", default=DISTILL.hidden_weight, show_default=True, help="Hidden-state MSE weight (mapped layers)."
)
@click.option(
    "--attention-weight", default=DISTILL.attention_weight, show_default=True, help="Attention-map loss weight."
)
@click.option(
    "--embedding-weight", default=DISTILL.embedding_weight, show_default=True, help="Embedding-output MSE weight."
)
@click.option(
    "--attention-loss",
    type=click.Choice(["mse", "kl"]),
    default=DISTILL.attention_loss,
    show_default=True,
    help="How attention maps are compared.",
)
@click.option(
    "--two-stage",
    type=click.IntRange(0),
    default=DISTILL.two_stage,
    show_default=True,
    help="TinyBERT style: this many epochs of intermediate losses only, then prediction losses.",
)
@click.option(
    "--patience",
    type=click.IntRange(1),
    default=DISTILL.patience,
    help="Stop after this many epochs without dev gain (the best epoch on dev is kept).",
)
@select_option(DISTILL)
@click.option(
    "--checkpoint-every",
    type=click.IntRange(1),
    default=DISTILL.checkpoint_every,
    show_default=True,
    help="Steps between resume checkpoints (also at every epoch end).",
)
@click.option(
    "--max-steps", type=click.IntRange(1), default=DISTILL.max_steps, help="Stop after this many steps (a quick trial)."
)
@click.option(
    "--cpu-shards",
    type=click.IntRange(1, 64),
    default=DISTILL.cpu_shards,
    help="On MLX's CPU: split each batch over this many streams (threads); default one per core, "
    "at most 8, at least 8 rows each. Ignored on a GPU.",
)
@click.option(
    "--seed", type=int, default=DISTILL.seed, show_default=True, help="Seed for init, shuffling, dropout, dev split."
)
@click.option(
    "--dev-fraction",
    type=FiniteFloatRange(0.01, 0.5),
    default=DISTILL.dev_fraction,
    show_default=True,
    help="Dev share of --train when there is no --dev and the teacher's manifest names no dev rows for it.",
)
@optimizer_options(DISTILL)
@with_columns
@with_unlabeled
@device_option
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--restart", is_flag=True, help="Discard an interrupted run instead of resuming it.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def distill(
    teacher_dir,
    train_path,
    dev_path,
    targets_dir,
    student,
    static_dim,
    init,
    vocab,
    vocab_extra,
    freeze_embeddings,
    embedding_size,
    quantize,
    block_size,
    init_layers,
    layer_map,
    out,
    epochs,
    min_steps,
    step_budget,
    batch_size,
    learning_rate,
    max_length,
    temperature,
    calibrate,
    kd_weight,
    ce_weight,
    hidden_weight,
    attention_weight,
    embedding_weight,
    attention_loss,
    two_stage,
    warmup_ratio,
    weight_decay,
    grad_accum,
    max_grad_norm,
    patience,
    select,
    checkpoint_every,
    max_steps,
    cpu_shards,
    seed,
    dev_fraction,
    text_column,
    label_column,
    unlabeled_paths,
    unlabeled_column,
    device,
    force,
    restart,
    as_json,
    quiet,
):
    """Distill the teacher into a small student written in MLX.

    Losses: soft targets (KL at temperature T, times T²), hard labels, hidden states (through a
    learned projection when widths differ), attention maps, embeddings — each with a weight,
    constant (W) or linear (START:END). Re-running an interrupted command resumes from its last
    checkpoint and ends with the same weights; --restart discards it. A NaN/inf loss stops the
    run and names the step and the term.

    \b
    Examples:
      mlx-edge distill --teacher teacher --train train.csv --student tiny --out student
      mlx-edge distill --teacher teacher --train train.csv --unlabeled notes.txt --out student
      mlx-edge distill --teacher teacher --train train.csv --targets targets --student half \\
          --init teacher --hidden-weight 1 --attention-weight 1 --out student
      mlx-edge distill --teacher teacher --train train.csv --targets targets --student student \\
          --quantize int4 --epochs 2 --learning-rate 5e-5 --out student-int4

    \b
    Data parallel over several processes or Macs, with MLX's launcher (rank 0 writes the student):
      mlx.launch --hostfile hosts.json -- mlx-edge distill --teacher teacher --train train.csv \\
          --targets targets --out student
    """
    from mlx_edge.distill.api import distill as run  # lazy: --help stays instant
    from mlx_edge.distill.loop import LoopConfig  # lazy: --help stays instant

    settings = DistillSettings(
        student=student,
        init=init,
        vocab=vocab,
        vocab_extra=vocab_extra,
        freeze_embeddings=freeze_embeddings,
        embedding_size=embedding_size,
        quantize=quantize,
        block_size=block_size,
        layer_map=layer_map,
        max_length=max_length,
        epochs=epochs,
        min_steps=min_steps,
        step_budget=step_budget,
        batch_size=batch_size,
        learning_rate=learning_rate,
        warmup_ratio=warmup_ratio,
        weight_decay=weight_decay,
        grad_accum=grad_accum,
        max_grad_norm=max_grad_norm,
        temperature=temperature,
        calibrate=calibrate,
        kd_weight=kd_weight,
        ce_weight=ce_weight,
        hidden_weight=hidden_weight,
        attention_weight=attention_weight,
        embedding_weight=embedding_weight,
        attention_loss=attention_loss,
        two_stage=two_stage,
        patience=patience,
        select=select,
        checkpoint_every=checkpoint_every,
        max_steps=max_steps,
        cpu_shards=cpu_shards,
        seed=seed,
        dev_fraction=dev_fraction,
        device=device,
    )
    loop = LoopConfig.from_settings(settings)

    def report_epoch(m):
        echo_err(
            f"epoch {m['epoch']}: dev accuracy {m['dev_accuracy']:.3f}  macro-F1 {m['dev_macro_f1']:.3f}  "
            f"agreement {m['teacher_agreement']:.3f}  {m['samples_per_second']:.1f} samples/s",
            quiet,
        )

    transfer = {}
    if unlabeled_paths:
        transfer = {"unlabeled": list(unlabeled_paths), "unlabeled_column": unlabeled_column}
    if student == "static":  # a token table, not a transformer: its own options and defaults
        from mlx_edge.cli.distill_static import static_runner  # lazy: --help stays instant

        if unlabeled_paths:
            raise ConfigError("--unlabeled does not work with --student static yet", "drop --unlabeled or use a preset")
        from mlx_edge.runtime.distributed import mlx_group  # lazy: --help stays instant

        if mlx_group() is not None:
            raise ConfigError(
                "--student static trains in one process (under mlx.launch every process would write it)",
                "run it without mlx.launch",
            )
        run = static_runner(click.get_current_context())
    report = run(
        teacher=teacher_dir,
        train=train_path,
        out=out,
        dev=dev_path,
        targets=targets_dir,
        student=student,
        init=init,
        vocab=vocab,
        vocab_extra=vocab_extra,
        freeze_embeddings=freeze_embeddings,
        embedding_size=embedding_size,
        quantize=quantize,
        block_size=block_size,
        init_layers=init_layers or None,
        layer_map=layer_map,
        max_length=max_length,
        loop=loop,
        dev_fraction=dev_fraction,
        text_column=text_column,
        label_column=label_column,
        device=device,
        force=force,
        restart=restart,
        progress=not quiet,
        on_epoch=report_epoch,
        **transfer,
    )
    if report is None:  # a process of `mlx.launch` other than rank 0: rank 0 writes and reports
        return
    if as_json:
        click.echo(json.dumps(asdict(report), indent=2))
        return
    r = report
    click.echo(
        f"student written to {r.out_dir}{' (resumed)' if r.resumed else ''}\n"
        f"dev set        {r.dev}\n"
        + (f"transfer set   {r.transfer_rows} unlabeled rows (teacher terms only)\n" if r.transfer_rows else "")
        + f"               {'teacher':>12} {'student':>12}\n"
        f"dev accuracy   {r.teacher_dev_accuracy:>12.3f} {r.student_dev_accuracy:>12.3f}"
        f"   retained {r.retained:.1%}, agreement {r.agreement:.1%}\n"
        f"parameters     {r.teacher_parameters / 1e6:>11.1f}M {r.student_parameters / 1e6:>11.1f}M"
        f"   {r.teacher_parameters / r.student_parameters:.1f}x smaller\n"
        f"file size      {r.teacher_file_bytes / 1e6:>10.1f}MB {r.student_file_bytes / 1e6:>10.1f}MB\n"
        f"samples/s      {r.teacher_samples_per_second:>12.1f} {r.student_samples_per_second:>12.1f}"
        f"   {r.speedup:.1f}x faster (MLX, same backend and batches; median of 5 interleaved passes)\n"
        f"{r.kept} epoch {r.best_epoch} of {r.epochs_run} kept{' (early stop)' if r.stopped_early else ''}, "
        f"{r.steps} steps, {r.train_samples_per_second:.1f} training samples/s"
        + "".join(f"\nnote: {note}" for note in r.notes)
    )
