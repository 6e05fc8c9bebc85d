"""`adapt(...)`: teach the augment LLM the user's domain with a LoRA adapter, trained by mlx-lm.

The labeled rows become augment's own requests answered with real rows (adapt_data.py); mlx-lm's
tuner does the rest: `linear_to_lora_layers`, `CompletionsDataset` with the prompt masked out of
the loss, `train` with its compiled step. The adapter directory is mlx-lm's (adapters.safetensors,
adapter_config.json), so `mlx_lm.load(model, adapter_path=DIR)` and `augment --adapter DIR` read
it; `adapt_report.json` beside them holds the loss per step, tokens/s and peak memory. It is built
in a staging folder and renamed into place: a failed or interrupted run leaves `out` as it was.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlx_edge.augment.adapt_data import Pair, build_pairs, fit
from mlx_edge.augment.adapter import CONFIG, REPORT, WEIGHTS, base_identity
from mlx_edge.augment.generate import check_llm, load_llm
from mlx_edge.augment.prompt import PROMPT_TEMPLATE
from mlx_edge.data import LabeledData, read_labeled
from mlx_edge.errors import AdaptError, DataError, DataWarning, OutputError
from mlx_edge.fileio import atomic_write_json, refuse_overwriting_inputs, remove_stale_staging, staging_dir
from mlx_edge.manifest import file_fingerprint, versions
from mlx_edge.progress import progress_bar
from mlx_edge.settings import ADAPT, AUGMENT, AdaptSettings

LORA_DROPOUT, LORA_SCALE = 0.0, 20.0  # mlx_lm.lora's defaults
VALIDATION_MIN_ROWS = 20  # fewer rows: every one is needed for training
VALIDATION_SHARE = 0.1


@dataclass
class AdaptResult:
    out: str
    steps: int
    losses: list[tuple[int, float]]  # (step, training loss of that step's batch)
    tokens_per_second: float  # answer tokens (the ones the loss is on, as mlx_lm.lora counts) per second
    peak_memory_gb: float  # MLX's peak while training: weights, activations, optimizer state
    seconds: float  # the training loop, compile included (loading and validation not)
    examples: int  # labeled rows trained on (each an answer line once per epoch)
    validation_examples: int = 0  # labeled rows held out
    validation_loss: tuple[float, float] | None = None  # before training, after it
    sequence_tokens_per_second: float = 0.0  # every token through the model (prompts too)
    pairs: int = 0  # prompt/answer pairs over all epochs
    dropped_rows: int = 0  # answer rows, over all epochs, that no pair within max_seq_length could hold
    model: str = ""
    settings: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {**asdict(self), "losses": [list(p) for p in self.losses]}


def adapt(
    *,
    model: str | Path,
    data: Path,
    out: Path,
    rank: int = ADAPT.rank,
    epochs: int = ADAPT.epochs,
    batch_size: int = ADAPT.batch_size,
    learning_rate: float = ADAPT.learning_rate,
    max_seq_length: int = ADAPT.max_seq_length,
    num_layers: int = ADAPT.num_layers,
    seed: int = ADAPT.seed,
    text_column: str | None = None,
    label_column: str | None = None,
    on_step: Callable[[dict], None] | None = None,
    progress: bool = True,
    force: bool = False,
) -> AdaptResult:
    """Train a LoRA adapter of `model` (a built-in name such as smollm2-135m-instruct, an mlx-lm
    directory or a hub id) on the labeled rows of `data`, into the directory `out`.

    `on_step` gets {"step", "total_steps", "loss", "tokens_per_second", "peak_memory_gb",
    "learning_rate"} after every optimizer step (a live loss curve)."""
    settings = AdaptSettings(  # refuses a value out of range (rank 0, epochs 0, ...) as one line
        rank=rank,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_seq_length=max_seq_length,
        num_layers=num_layers,
        seed=seed,
    )
    model, data, out = str(model), Path(data), Path(out)
    check_llm(model)
    refuse_overwriting_inputs(out, data, model if Path(model).expanduser().exists() else None)
    if out.exists() and not force:
        raise OutputError(f"{out} already exists", "pass --force to replace it, or choose another --out")
    rows = read_labeled(data, text_column=text_column, label_column=label_column)
    train_rows, val_rows = _hold_out(rows, seed)
    # every epoch's pairs in one set (new shots and groupings each epoch); mlx-lm shuffles its batches
    pairs = [p for epoch in range(epochs) for p in _pairs(train_rows, train_rows, seed, epoch)]
    _warn_left_out(train_rows, pairs)
    _check_enough(pairs, batch_size, data, len(rows))

    base = base_identity(model, progress=progress)
    llm, tokenizer = load_llm(model)
    length = _length(tokenizer)
    train_pairs, dropped = fit(pairs, length, max_seq_length)
    val_pairs, _ = fit(_pairs(val_rows, train_rows, seed, -1), length, max_seq_length)
    _check_enough(train_pairs, batch_size, data, len(rows), max_seq_length)

    remove_stale_staging(out)  # what a killed run left beside it (a live run's is kept)
    staging = staging_dir(out)
    try:
        result = _train(llm, tokenizer, train_pairs, val_pairs, settings, staging, on_step, progress)
        result.examples = sum(map(len, train_rows.values()))
        result.validation_examples = sum(map(len, val_rows.values()))
        result.dropped_rows, result.model, result.out = dropped, model, str(out)
        _write_config(staging, model, base, data, settings, rows, len(train_pairs))
        atomic_write_json(
            staging / REPORT,
            {"kind": "adapt", "versions": versions(), "base": base, "data": file_fingerprint(data), **result.summary()},
        )
        _replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


# ------------------------------------------------------------------------------------------ inputs


def _hold_out(rows: LabeledData, seed: int) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Texts by class for training and for the validation loss: a tenth of each class of 5 or more
    rows when the file has at least VALIDATION_MIN_ROWS, else none."""
    by_class: dict[str, list[str]] = {}
    for text, label in zip(rows.texts, rows.labels):
        by_class.setdefault(label, []).append(text)
    if len(rows) < VALIDATION_MIN_ROWS:
        return by_class, {}
    rng = random.Random(f"adapt-validation:{seed}")
    train, val = {}, {}
    for label, texts in by_class.items():
        texts = texts[:]
        rng.shuffle(texts)
        n = round(len(texts) * VALIDATION_SHARE) if len(texts) >= 5 else 0
        train[label], val[label] = texts[n:], texts[:n]
    return train, {k: v for k, v in val.items() if v}


def _pairs(answers: dict, context: dict, seed: int, epoch: int) -> list[Pair]:
    """One epoch's pairs: new shots and groupings each epoch, in augment's default shape."""
    rng = random.Random(f"adapt:{seed}:{epoch}")
    return build_pairs(answers, context, shots=AUGMENT.shots, lines=AUGMENT.per_prompt, rng=rng)


def _check_enough(pairs: list[Pair], batch_size: int, data: Path, rows: int, max_seq_length: int | None = None):
    if len(pairs) >= batch_size:
        return
    if max_seq_length is not None:
        raise DataError(
            f"only {len(pairs)} prompts of {data} fit in --max-seq-length {max_seq_length} tokens; "
            f"a batch needs {batch_size}",
            "raise --max-seq-length, or lower --batch-size",
        )
    raise DataError(
        f"{data} has too few rows to adapt on ({rows} rows make {len(pairs)} prompts over all epochs; "
        f"a batch needs {batch_size})",
        "add examples (at least two per class), or lower --batch-size",
    )


def _warn_left_out(train_rows: dict[str, list[str]], pairs: list[Pair]) -> None:
    left_out = sorted(set(train_rows) - {p.label for p in pairs})
    if left_out:
        warnings.warn(
            f"class {', '.join(map(repr, left_out))} has a single example: a prompt needs one to show and "
            "another to answer with, so adapt leaves it out (add a second example to teach it)",
            DataWarning,
            stacklevel=3,
        )


def _length(tokenizer) -> Callable[[Pair], int]:
    dataset = _dataset([], tokenizer)
    return lambda pair: len(dataset.process(_render(pair, tokenizer))[0])


def _render(pair: Pair, tokenizer) -> dict:
    """The pair as augment will prompt this model: instructed (chat template) or continuing a list (none)."""
    return pair.render(completion=not getattr(tokenizer, "has_chat_template", False))


def _dataset(records: list[dict], tokenizer):
    """mlx-lm's prompt/completion dataset, the prompt masked out of the loss; without a chat template,
    the list prompt as augment sends it then (generate.MlxLmGenerator.format), its continuation the answer."""
    from mlx_lm.tuner.datasets import CompletionsDataset  # lazy: mlx-lm only where an LLM is trained

    if getattr(tokenizer, "has_chat_template", False):
        return CompletionsDataset(records, tokenizer, "prompt", "completion", mask_prompt=True)
    return _PlainCompletions(records, tokenizer)


class _PlainCompletions:
    """CompletionsDataset's shape for a model without a chat template: the list prompt, its continuation, eos."""

    def __init__(self, records: list[dict], tokenizer):
        self._data, self.tokenizer = records, tokenizer

    def process(self, record: dict) -> tuple[list[int], int]:
        prompt = list(self.tokenizer.encode(record["prompt"]))
        answer = list(self.tokenizer.encode(record["completion"], add_special_tokens=False))
        return prompt + answer + [self.tokenizer.eos_token_id], len(prompt)

    def __getitem__(self, i: int) -> dict:
        return self._data[i]

    def __len__(self) -> int:
        return len(self._data)


# ---------------------------------------------------------------------------------------- training


def _train(llm, tokenizer, train_pairs, val_pairs, settings, staging, on_step, progress) -> AdaptResult:
    """mlx-lm's LoRA training, its reports turned into `on_step` calls and our progress bar."""
    import mlx.core as mx  # lazy: the CLI's --help must not import MLX
    import mlx.optimizers as optim  # lazy: as above
    import numpy as np  # lazy: as above
    from mlx_lm.tuner.datasets import CacheDataset  # lazy: mlx-lm, heavy, only when training
    from mlx_lm.tuner.trainer import TrainingArgs, evaluate, iterate_batches, train  # lazy: as above
    from mlx_lm.tuner.utils import linear_to_lora_layers  # lazy: as above

    s = settings
    layers = len(llm.layers) if s.num_layers == -1 else min(s.num_layers, len(llm.layers))
    mx.random.seed(s.seed)  # the LoRA A matrices' initial values
    np.random.seed(s.seed)  # mlx-lm's batch order
    llm.freeze()
    linear_to_lora_layers(llm, layers, {"rank": s.rank, "dropout": LORA_DROPOUT, "scale": LORA_SCALE})
    train_set = CacheDataset(_dataset([_render(p, tokenizer) for p in train_pairs], tokenizer))
    val_set = (
        CacheDataset(_dataset([_render(p, tokenizer) for p in val_pairs], tokenizer))
        if len(val_pairs) >= s.batch_size
        else None
    )
    steps = len(train_set) // s.batch_size  # every pair once: the pairs already hold every epoch
    args = TrainingArgs(
        batch_size=s.batch_size,
        iters=steps,
        steps_per_report=1,  # every step reaches on_step: the live loss curve
        steps_per_eval=steps + 1,
        steps_per_save=steps + 1,  # no intermediate checkpoints: the staging folder gets the final one
        max_seq_length=s.max_seq_length,
        adapter_file=str(staging / WEIGHTS),
    )

    def val_loss():
        return evaluate(llm, val_set, s.batch_size, -1, max_seq_length=s.max_seq_length) if val_set else None

    before = val_loss()
    mx.reset_peak_memory()
    report = _Report(steps, on_step, progress_bar(steps, desc="adapt", unit="step", enabled=progress))
    start = time.perf_counter()
    try:
        # mlx-lm's trainer draws its own table on stdout, which belongs to our results (--json)
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            train(
                llm,
                optim.Adam(learning_rate=s.learning_rate),
                train_set,
                None,  # validation runs before and after (below), not inside mlx-lm's loop
                args=args,
                iterate_batches=report.counting(iterate_batches),
                training_callback=report,
            )
    finally:
        report.close()
    seconds = time.perf_counter() - start
    after = val_loss()
    return AdaptResult(
        out="",
        steps=steps,
        losses=report.losses,
        tokens_per_second=report.trained_tokens / seconds,
        peak_memory_gb=report.peak_gb,
        seconds=seconds,
        examples=0,
        validation_loss=None if before is None else (before, after),
        sequence_tokens_per_second=report.sequence_tokens / seconds,
        pairs=len(train_pairs),
        settings=asdict(settings),
    )


class _Report:
    """mlx-lm's TrainingCallback: each step's report to `on_step` and the bar; a NaN loss stops the run."""

    def __init__(self, total: int, on_step, bar):
        self.total, self.on_step, self.bar = total, on_step, bar
        self.losses: list[tuple[int, float]] = []
        self.trained_tokens, self.sequence_tokens, self.peak_gb = 0, 0, 0.0

    def on_train_loss_report(self, info: dict) -> None:
        step, loss = info["iteration"], info["train_loss"]
        if not math.isfinite(loss):
            raise AdaptError(
                f"step {step}: the loss went bad (loss={loss}); training stopped and nothing was written",
                "lower --learning-rate, or check the data",
            )
        self.losses.append((step, loss))
        self.trained_tokens = info["trained_tokens"]
        self.peak_gb = max(self.peak_gb, info["peak_memory"])
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            self.bar.update(1)
        if self.on_step is not None:
            self.on_step(
                {
                    "step": step,
                    "total_steps": self.total,
                    "loss": loss,
                    "tokens_per_second": info["tokens_per_second"],
                    "peak_memory_gb": info["peak_memory"],
                    "learning_rate": info["learning_rate"],
                }
            )

    def on_val_loss_report(self, info: dict) -> None:
        pass

    def counting(self, iterate_batches):
        """mlx-lm's batch iterator, counting every token that goes through the model."""

        def batches(**kwargs):
            for batch, lengths in iterate_batches(**kwargs):
                self.sequence_tokens += int(lengths[:, 1].sum().item())
                yield batch, lengths

        return batches

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ----------------------------------------------------------------------------------------- outputs


def _write_config(staging: Path, model: str, base: dict, data: Path, s: AdaptSettings, rows: LabeledData, pairs: int):
    """mlx-lm's adapter_config.json keys (load_adapters reads num_layers, lora_parameters,
    fine_tune_type), and what mlx-edge checks before using it under `mlx_edge`."""
    atomic_write_json(
        staging / CONFIG,
        {
            "model": model,
            "fine_tune_type": "lora",
            "num_layers": s.num_layers,
            "lora_parameters": {"rank": s.rank, "dropout": LORA_DROPOUT, "scale": LORA_SCALE},
            "optimizer": "adam",
            "learning_rate": s.learning_rate,
            "batch_size": s.batch_size,
            "iters": pairs // s.batch_size,
            "max_seq_length": s.max_seq_length,
            "mask_prompt": True,
            "seed": s.seed,
            "data": str(data),
            "mlx_edge": {
                "base": base,
                "data": file_fingerprint(data),
                "classes": sorted(set(rows.labels)),
                "prompt_template": PROMPT_TEMPLATE,
                "shots": AUGMENT.shots,
                "answer_lines": AUGMENT.per_prompt,
                "epochs": s.epochs,
                "versions": versions(),
            },
        },
    )


def _replace(staging: Path, out: Path) -> None:
    """Rename the finished adapter into place; an existing `out` (--force) is set aside first."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() and not old.is_symlink() else old.unlink()
