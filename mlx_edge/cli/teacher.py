"""`mlx-edge teacher train` and `mlx-edge teacher label`. Imports only click at module level."""

from __future__ import annotations

import os
from pathlib import Path

import click

from mlx_edge.cli.options import (
    FiniteFloatRange,
    ShareOrAuto,
    device_option,
    echo_err,
    layer_list,
    optimizer_options,
    option_group,
    renamed,
    select_option,
    unlabeled_options_for,
    with_columns,
    with_unlabeled,
)
from mlx_edge.settings import (
    DISTILL,
    FEW_LABELS_BELOW,
    FEW_LABELS_BLEND,
    LABEL,
    SELF_TRAIN_BELOW,
    TEACHER,
    TEACHER_EDITS,
    WORD_BAGS,
)


@click.group()
def teacher():
    """Fine-tune the teacher (PyTorch) and run it over text to make distillation targets."""


@teacher.command("train")
@click.option(
    "--model",
    required=True,
    help="Hugging Face model id, local directory (BERT family), or built-in name: multilingual-e5-small.",
)
@click.option("--train", "train_path", type=click.Path(path_type=Path), required=True, help="Labeled training file.")
@click.option(
    "--dev",
    "dev_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Labeled dev file; else a stratified split of --train.",
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Directory to write the teacher to.")
@click.option(
    "--epochs", type=click.IntRange(1), default=TEACHER.epochs, show_default=True, help="Passes over the data."
)
@click.option(
    "--min-steps",
    type=click.IntRange(0),
    default=TEACHER.min_steps,
    show_default=True,
    help="At least this many optimizer steps: a few hundred rows run more epochs than --epochs.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1),
    default=TEACHER.batch_size,
    show_default=True,
    help="Examples per step (per process).",
)
@click.option(
    "--learning-rate",
    type=FiniteFloatRange(0, min_open=True),
    default=TEACHER.learning_rate,
    show_default=True,
    help="Peak learning rate (AdamW).",
)
@renamed("--lr", "--learning-rate")
@click.option(
    "--max-length",
    type=click.IntRange(8, 4096),
    default=TEACHER.max_length,
    help="Token limit per text; default: the smallest of 64, 128, 256, 512 that holds 99% of the training "
    "texts whole (the student and the bundle take the teacher's).",
)
@click.option(
    "--dev-fraction",
    type=FiniteFloatRange(0.01, 0.5),
    default=TEACHER.dev_fraction,
    show_default=True,
    help="Dev share when no --dev is given.",
)
@click.option(
    "--seed", type=int, default=TEACHER.seed, show_default=True, help="Seed for init, shuffling and the dev split."
)
@optimizer_options(TEACHER)
@with_columns
@device_option
@click.option("--trust-remote-code", is_flag=True, help="Allow the model's own Python code to run (off by default).")
@click.option(
    "--freeze-embeddings/--train-embeddings",
    default=TEACHER.freeze_embeddings,
    help="Keep the word-embedding table as pretrained, or train it. Default: kept when the table holds most "
    "of the model's parameters and at least 20M (multilingual-e5-small's 250k pieces: their optimizer "
    "update was most of each step on a CPU, for the same dev accuracy), else trained.",
)
@click.option(
    "--freeze-layers",
    type=click.IntRange(0),
    default=TEACHER.freeze_layers,
    show_default=True,
    help="Keep all embeddings and this many bottom blocks as pretrained: backward stops above them.",
)
@click.option(
    "--backend",
    type=click.Choice(["torch", "mlx"]),
    default=TEACHER.backend,
    show_default=True,
    help="torch: transformers on CUDA/MPS/CPU (torchrun for several GPUs); mlx: the MLX BERT, one process "
    "(Metal on a Mac); its teacher is a transformers directory like torch's.",
)
@click.option(
    "--head",
    type=click.Choice(["auto", "probe", "new"]),
    default=TEACHER.head,
    show_default=True,
    help="probe: the head reads the mean of the last hidden states and starts as a linear probe on the frozen "
    "model (epoch 0 on dev; a few hundred labels gain most: docs/teacher.md); new: BERT's [CLS] pooler and a "
    "random head; auto: probe below 1,000 training rows, else new. A teacher trained before keeps its own head.",
)
@select_option(TEACHER)
@click.option(
    "--refit",
    type=click.Choice(["auto", "yes", "no"]),
    default=TEACHER.refit,
    show_default=True,
    help="Once measured on dev, train again on every labeled row, dev included (the dev figures stay the "
    "first fit's): yes, no, or auto: with no --dev, when the last epoch is kept (a dev split under 200 rows), "
    f"below {FEW_LABELS_BELOW} training rows, and when the teacher does not self-train.",
)
@click.option(
    "--blend",
    type=ShareOrAuto(),
    default=TEACHER.blend,
    show_default=True,
    help="With the probe head: the teacher written is this share of its fine-tuned weights plus the rest of "
    "the linear probe it started as (WiSE-FT); 1: the fine-tuned weights alone. Dev judges the blend. auto: "
    f"{FEW_LABELS_BLEND:g} below {FEW_LABELS_BELOW} training rows when the last epoch is kept and the teacher "
    "does not self-train (a few dozen labels: docs/teacher.md), else 1.",
)
@option_group(unlabeled_options_for("that --self-train learns from"))
@click.option(
    "--self-train",
    type=click.Choice(TEACHER.CHOICES["self_train"]),
    default=TEACHER.self_train,
    show_default=True,
    help="With --unlabeled: train again on the labeled rows plus the first fit's surest answers on that text "
    f"(of each label, the more confident half): yes, no, or auto: below {SELF_TRAIN_BELOW:,} labeled training rows.",
)
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def teacher_train(
    model,
    train_path,
    dev_path,
    out,
    epochs,
    min_steps,
    batch_size,
    learning_rate,
    max_length,
    warmup_ratio,
    weight_decay,
    grad_accum,
    max_grad_norm,
    dev_fraction,
    seed,
    text_column,
    label_column,
    device,
    trust_remote_code,
    freeze_embeddings,
    freeze_layers,
    backend,
    head,
    select,
    refit,
    blend,
    unlabeled_paths,
    unlabeled_column,
    self_train,
    force,
    quiet,
):
    """Fine-tune a BERT-family model on labeled text: PyTorch on CUDA > MPS > CPU, or MLX.

    Writes an HF directory (config.json with the labels, model.safetensors, tokenizer files),
    metrics.jsonl (one line per epoch) and mlx_edge_manifest.json. The best dev epoch is kept.
    Under torchrun it trains with DistributedDataParallel and only rank 0 writes.

    \b
    Examples:
      mlx-edge teacher train --model bert-base-chinese --train train.csv --out teacher
      mlx-edge teacher train --model ./minilm --train train.jsonl --dev dev.jsonl --epochs 5 --out t
      mlx-edge teacher train --model multilingual-e5-small --train train.jsonl --out t
      mlx-edge teacher train --model multilingual-e5-small --train few.csv --unlabeled notes.txt --out t
      mlx-edge teacher train --model multilingual-e5-small --backend mlx --train train.jsonl --out t
      torchrun --nproc_per_node 4 -m mlx_edge teacher train --model bert-base-chinese --train t.csv --out t
    """

    from mlx_edge.teacher.train import train_teacher  # lazy: --help stays instant

    main_rank = os.environ.get("RANK", "0") == "0"
    quiet = quiet or not main_rank

    def report(m):
        refit_run = m.get("refit", False)  # the second fit's dev rows are among those it learns
        second = "refit " if refit_run else "self-trained " if m.get("self_train") else ""
        echo_err(
            f"{second}epoch {m['epoch']}{' (linear probe)' if m['epoch'] == 0 else ''}: "
            f"loss {m['train_loss']:.4f}  dev accuracy {m['dev_accuracy']:.3f}{' (seen)' if refit_run else ''}"
            f"  macro-F1 {m['dev_macro_f1']:.3f}  {m['samples_per_second']:.1f} samples/s",
            quiet,
        )

    result = train_teacher(
        model=model,
        train=train_path,
        dev=dev_path,
        out=out,
        epochs=epochs,
        min_steps=min_steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_length=max_length,
        warmup_ratio=warmup_ratio,
        weight_decay=weight_decay,
        grad_accum=grad_accum,
        max_grad_norm=max_grad_norm,
        seed=seed,
        device=device,
        dev_fraction=dev_fraction,
        text_column=text_column,
        label_column=label_column,
        force=force,
        trust_remote_code=trust_remote_code,
        freeze_embeddings=freeze_embeddings,
        freeze_layers=freeze_layers,
        backend=backend,
        head=head,
        select=select,
        refit=refit,
        blend=blend,
        self_train=self_train,
        unlabeled=unlabeled_paths,
        unlabeled_column=unlabeled_column,
        progress=not quiet,
        on_epoch=report,
    )
    if main_rank:
        kept = (
            f"trained again on every labeled row, dev included, {result.epochs} epochs; dev accuracy before that"
            if result.refit
            else f"best epoch {result.best_epoch} of {result.epochs}, dev accuracy"
        )
        if result.self_trained:
            kept = f"self-trained with {result.self_trained} pseudo-labeled texts, {kept}"
        elif unlabeled_paths:
            echo_err(
                f"--unlabeled not used: --self-train {self_train} (auto: below {SELF_TRAIN_BELOW:,} labeled training rows)",
                quiet,
            )
        click.echo(
            f"teacher written to {result.out_dir}: {kept} {result.dev_accuracy:.3f} (macro-F1 "
            f"{result.dev_macro_f1:.3f}; majority class {result.majority_baseline:.3f}) on {result.device} x{result.world_size}"
        )


@teacher.command("label")
@click.option(
    "--teacher",
    "teacher_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="A trained teacher directory (from `teacher train`).",
)
@click.option(
    "--data",
    "data_paths",
    type=click.Path(path_type=Path),
    multiple=True,
    required=True,
    help="Labeled file(s) to run the teacher over (repeat --data for real + synthetic).",
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Targets directory to write.")
@click.option(
    "--backend",
    type=click.Choice(["torch", "mlx"]),
    default=LABEL.backend,
    show_default=True,
    help="torch: transformers on CUDA/MPS/CPU; mlx: the MLX BERT (fastest on a Mac).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1),
    default=LABEL.batch_size,
    show_default=True,
    help="Examples per forward pass.",
)
@click.option(
    "--max-length",
    type=click.IntRange(8, 4096),
    default=LABEL.max_length,
    help="Token limit; default: the teacher's training max length.",
)
@click.option(
    "--hidden-layers", callback=layer_list, default="", help="Hidden states to keep, e.g. 0,3,6 (0 = embeddings)."
)
@click.option(
    "--attention-layers",
    callback=layer_list,
    default="",
    help="Attention maps to keep, e.g. 3,6 (1-based encoder layers).",
)
@click.option(
    "--shard-size", type=click.IntRange(1), default=LABEL.shard_size, show_default=True, help="Examples per shard file."
)
@with_columns
@with_unlabeled
@device_option
@click.option("--force", is_flag=True, help="Start over even if --out holds (part of) a cache.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def teacher_label(
    teacher_dir,
    data_paths,
    out,
    backend,
    batch_size,
    max_length,
    hidden_layers,
    attention_layers,
    shard_size,
    text_column,
    label_column,
    unlabeled_paths,
    unlabeled_column,
    device,
    force,
    quiet,
):
    """Run the teacher over text and write the targets cache the student learns from.

    Logits (fp32) always; hidden states and attention maps (fp16) of the layers you name.
    Sharded safetensors with an index and a manifest. Re-running an interrupted command
    continues after the last complete shard; the disk space needed is checked first.
    Under torchrun the shards are dealt over the ranks (one GPU each on CUDA) and rank 0
    writes the one index: the cache is the same as a single process writes.

    \b
    Examples:
      mlx-edge teacher label --teacher teacher --data train.csv --out targets
      torchrun --nproc_per_node 2 -m mlx_edge teacher label --teacher teacher --data train.csv --out targets
      mlx-edge teacher label --teacher teacher --data train.csv --data synthetic.jsonl \\
          --hidden-layers 0,6,12 --attention-layers 6,12 --backend mlx --out targets
      mlx-edge teacher label --teacher teacher --data train.csv --unlabeled notes.txt --out targets
    """
    from mlx_edge.teacher.label import label_targets  # lazy: --help stays instant

    result = label_targets(
        teacher=teacher_dir,
        data=list(data_paths),
        out=out,
        backend=backend,
        device=device,
        batch_size=batch_size,
        max_length=max_length,
        hidden_layers=hidden_layers,
        attention_layers=attention_layers,
        shard_size=shard_size,
        text_column=text_column,
        label_column=label_column,
        unlabeled=list(unlabeled_paths) or None,
        unlabeled_column=unlabeled_column,
        force=force,
        progress=not quiet,
    )
    if result.rank != 0:  # under torchrun rank 0 reports for all
        return
    ranks = f", {result.world_size} ranks" if result.world_size > 1 else ""
    if result.resumed_from and result.resumed_from == result.shards:
        click.echo(f"{result.out_dir} is already complete ({result.examples} examples, {result.shards} shards)")
    else:
        resumed = f", resumed after shard {result.resumed_from}" if result.resumed_from else ""
        click.echo(
            f"targets written to {result.out_dir}: {result.examples} examples in {result.shards} shards"
            f"{resumed} ({result.samples_per_second:.1f} examples/s, {result.backend}{ranks})"
        )


@teacher.command("edits")
@click.option(
    "--teacher",
    "teacher_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="A trained teacher directory (from `teacher train`): its word embeddings choose the swaps.",
)
@click.option(
    "--train", "train_path", type=click.Path(path_type=Path), required=True, help="The labeled training file."
)
@click.option("--dev", "dev_path", type=click.Path(path_type=Path), help="Dev file (its rows are never edited).")
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="Text file to write, one sentence per line."
)
@click.option(
    "--per-text",
    type=click.IntRange(1, 1000),
    default=TEACHER_EDITS,
    show_default=True,
    help="New sentences per training row (fewer for a short text with few words to swap).",
)
@click.option(
    "--bags",
    type=click.IntRange(0, 1_000_000),
    default=WORD_BAGS,
    show_default=True,
    help="Word bags to add, spread over the training rows: a row's words among broad words of its script "
    "(English: WordNet's; Chinese: the vocabulary's most frequent pieces). 0: none.",
)
@click.option(
    "--dev-fraction",
    type=click.FloatRange(0.01, 0.5),
    default=DISTILL.dev_fraction,
    show_default=True,
    help="Without --dev: the share distill cuts from --train as dev (the teacher's own choice first).",
)
@click.option("--seed", type=int, default=DISTILL.seed, show_default=True, help="Seed of the swaps and of the split.")
@with_columns
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
def teacher_edits(
    teacher_dir, train_path, dev_path, out, per_text, bags, dev_fraction, seed, text_column, label_column, force
):
    """New sentences from the training rows, words swapped for the teacher's nearest ones.

    TinyBERT-style augmentation: each word that is one piece of the teacher's vocabulary (each
    piece in Chinese) is replaced with probability 0.4 by one of its 10 nearest pieces in the
    teacher's word-embedding table, among the words of the same script in your rows (for Chinese,
    and the vocabulary's 8,000 most frequent Chinese pieces). The sentences
    carry no label: pass the file as --unlabeled to `teacher label` and `distill`, and the student
    learns the teacher's answers on them. Dev rows (distill's own choice) are never edited.
    Then --bags word bags: short runs of a row's words (Chinese: characters) mixed with broad
    words of the same script, in no order; the teacher answers them too.

    \b
    Example:
      mlx-edge teacher edits --teacher teacher --train train.csv --out edits.txt
      mlx-edge teacher label --teacher teacher --data train.csv --unlabeled edits.txt --out targets
      mlx-edge distill --teacher teacher --train train.csv --targets targets --unlabeled edits.txt --out student
    """
    from mlx_edge.augment.neighbours import write_teacher_edits  # lazy: --help stays instant

    made, made_bags, rows = write_teacher_edits(
        teacher=teacher_dir,
        train=train_path,
        dev=dev_path,
        out=out,
        per_text=per_text,
        dev_fraction=dev_fraction,
        seed=seed,
        text_column=text_column,
        label_column=label_column,
        force=force,
        bags=bags,
    )
    click.echo(f"{made} sentences and {made_bags} word bags from {rows} training rows written to {out}")
