"""`teacher label`: run the teacher over text and write the targets cache (see mlx_edge/targets.py).

Backends: `torch` (CUDA > MPS > CPU, transformers' own model) or `mlx` (the teacher's weights in
the MLX BERT: on a Mac the fastest path). Both tokenize with the teacher's tokenizer through the
`tokenizers` library, so their rows line up exactly.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlx_edge.data import bucketed_batches, collate, read_labeled
from mlx_edge.errors import ConfigError, DataError, MlxEdgeError, ModelError, SetupMismatch, TargetsError
from mlx_edge.fileio import refuse_overwriting_inputs
from mlx_edge.manifest import MANIFEST_NAME, file_fingerprint, read_manifest, write_manifest
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.inference import BatchForward
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.progress import progress_bar
from mlx_edge.runtime.devices import mlx_device, torch_placement
from mlx_edge.runtime.distributed import Ranks, init_ranks
from mlx_edge.settings import LABEL
from mlx_edge.targets import estimate_bytes, human_bytes, read_index, text_hash, write_index, write_shard
from mlx_edge.teacher.source import (
    check_local_model,
    file_hash_of_weights,
    head_labels,
    load_classifier,
    tokenizer_hash,
    transformers_progress,
)
from mlx_edge.transfer import normalized, read_unlabeled

BACKENDS = ("torch", "mlx")


@dataclass
class LabelResult:
    out_dir: str
    examples: int
    shards: int
    resumed_from: int  # shards already complete when this run started
    bytes_written: int
    samples_per_second: float
    backend: str
    rank: int = 0  # under torchrun: this process's rank, of world_size
    world_size: int = 1


def label_targets(
    *,
    teacher: Path,
    data: list[Path],
    out: Path,
    backend: str = LABEL.backend,
    device: str = LABEL.device,
    batch_size: int = LABEL.batch_size,
    max_length: int | None = LABEL.max_length,
    hidden_layers: list[int] | None = None,
    attention_layers: list[int] | None = None,
    shard_size: int = LABEL.shard_size,
    text_column: str | None = None,
    label_column: str | None = None,
    unlabeled: list[Path] | None = None,
    unlabeled_column: str | None = None,
    force: bool = False,
    progress: bool = True,
    on_shard: Callable[[int, int], None] | None = None,
) -> LabelResult:
    """Write (or finish) a targets cache of `teacher` over the texts of `data` files, in order, then
    those of the `unlabeled` files (transfer.py) that are not already among them, for `distill
    --unlabeled` to find."""
    teacher, out = Path(teacher), Path(out)
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}", f"use one of {', '.join(BACKENDS)}")
    config = check_local_model(teacher)
    refuse_overwriting_inputs(out, teacher, *data, *(unlabeled or ()))  # --force would delete it
    labels = head_labels(config)
    if labels is None:
        raise ModelError(
            f"{teacher} has no trained classification head",
            "fine-tune it first: mlx-edge teacher train --model ... --out DIR",
        )
    texts, data_labels, fingerprints = _read_texts(data, text_column, label_column)
    if unlabeled:
        known = {normalized(t) for t in texts}
        for path in unlabeled:
            for text in read_unlabeled(path, text_column=unlabeled_column):
                if normalized(text) not in known:
                    known.add(normalized(text))
                    texts.append(text)
            fingerprints.append({**file_fingerprint(Path(path)), "unlabeled": True, "column": unlabeled_column})
    unknown = sorted(set(data_labels) - set(labels))
    if unknown:
        raise ModelError(
            f"the teacher's labels {labels} differ from the data's labels {sorted(set(data_labels))}",
            f"{', '.join(unknown)} unknown to the teacher: label data of the teacher's task",
        )

    tokenizer = load_tokenizer(teacher)
    teacher_manifest = read_manifest(teacher) or {}
    max_length = min(max_length or teacher_manifest.get("max_length", 128), config["max_position_embeddings"])
    n_layers = config["num_hidden_layers"]
    hidden_layers = _check_layers(hidden_layers or [], 0, n_layers, "--hidden-layers")
    attention_layers = _check_layers(attention_layers or [], 1, n_layers, "--attention-layers")
    ids = [np.asarray(x, dtype=np.int32) for x in tokenizer.encode_batch(texts, max_length=max_length)]
    lengths = np.array([len(x) for x in ids])

    setup = {
        "teacher": str(teacher.resolve()),
        "teacher_hash": file_hash_of_weights(teacher),
        "tokenizer_hash": tokenizer_hash(teacher),
        "tokenizer": vars(tokenizer.settings),
        "max_length": max_length,
        "labels": labels,
        "hidden_layers": hidden_layers,
        "attention_layers": attention_layers,
        "shard_size": shard_size,
        "examples": len(texts),
        "data": fingerprints,
        "backend": backend,
    }
    ranks = init_ranks()  # under torchrun: shards dealt round-robin over the ranks, rank 0 keeps the index

    def check_space(start: int) -> None:
        need = estimate_bytes(
            lengths[start:],
            shard_size=shard_size,
            num_labels=len(labels),
            hidden_size=config["hidden_size"],
            heads=config["num_attention_heads"],
            hidden_layers=hidden_layers,
            attention_layers=attention_layers,
        )
        free = shutil.disk_usage(_existing_ancestor(out)).free
        if need > free * 0.95:
            raise TargetsError(
                f"the targets cache needs about {human_bytes(need)} but only {human_bytes(free)} "
                f"is free on the disk of {out}",
                "use fewer --hidden-layers, drop --attention-layers, lower --max-length, or another --out",
            )

    done = _prepare_out(out, setup, force, ranks, check_space)
    start_example = sum(s["count"] for s in done)
    if start_example == len(texts):
        return LabelResult(str(out), len(texts), len(done), len(done), 0, 0.0, backend, ranks.rank, ranks.world)

    if backend == "torch":
        transformers_progress(progress and ranks.main)
        forward = _torch_forward(teacher, device, attention_layers, ranks.local_rank)
    else:
        forward = _mlx_forward(teacher, device, batch_size)
    hashes = np.array([text_hash(t) for t in texts], dtype=np.int64)
    shards, written, started = list(done), 0, time.perf_counter()
    bar = progress_bar(len(texts), desc="label", unit="ex", enabled=progress and ranks.main, initial=start_example)
    total = -(-len(texts) // shard_size)
    for first in range(len(done), total, ranks.world):
        mine = None
        number = first + ranks.rank
        if number < total:
            rows = np.arange(number * shard_size, min(len(texts), (number + 1) * shard_size))
            tensors = _label_shard(
                forward,
                ids,
                rows,
                pad_id=tokenizer.pad_id,
                batch_size=batch_size,
                hidden_layers=hidden_layers,
                attention_layers=attention_layers,
            )
            tensors.update(ids=rows.astype(np.int64), text_hash=hashes[rows], lengths=lengths[rows].astype(np.int32))
            mine = write_shard(out, number, tensors)
        # The index only ever lists a complete prefix of shards: an interrupted run resumes after it.
        new = [e for e in ranks.gather(mine) if e is not None]
        shards += new
        if ranks.main:
            write_index(out, shards)
        for number, entry in enumerate(new, start=len(shards) - len(new)):
            written += (out / entry["file"]).stat().st_size
            if bar is not None:
                bar.update(entry["count"])
            if on_shard is not None and ranks.main:
                on_shard(number, entry["count"])
    if bar is not None:
        bar.close()
    ranks.barrier()  # the index is complete before any rank returns
    elapsed = time.perf_counter() - started
    return LabelResult(
        str(out),
        len(texts),
        len(shards),
        len(done),
        written,
        (len(texts) - start_example) / max(elapsed, 1e-9),
        backend,
        ranks.rank,
        ranks.world,
    )


def _read_texts(paths: list[Path], text_column, label_column):
    if not paths:
        raise DataError("no --data file given", "pass one or more labeled files with --data")
    texts, labels, fingerprints = [], [], []
    for path in paths:
        part = read_labeled(path, text_column=text_column, label_column=label_column)
        texts += part.texts
        labels += part.labels
        fingerprints.append(file_fingerprint(path))
    return texts, labels, fingerprints


def _check_layers(layers: list[int], low: int, high: int, option: str) -> list[int]:
    bad = [k for k in layers if not low <= k <= high]
    if bad:
        raise ConfigError(
            f"{option} {bad} out of range: this teacher has layers {low}..{high}",
            f"choose layers between {low} and {high}",
        )
    return sorted(set(layers))


def _existing_ancestor(path: Path) -> Path:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path


def _prepare_out(out: Path, setup: dict, force: bool, ranks: Ranks, check_space: Callable[[int], None]) -> list[dict]:
    """The shards already done. Rank 0 alone checks `out` (resume or --force, free space) and starts
    the cache; the other ranks wait for it, then read the same index (or stop with rank 0's error)."""
    done, problem = [], None
    if ranks.main:
        try:
            done = _resume_point(out, setup, force)
            check_space(sum(s["count"] for s in done))
            if not done:
                out.mkdir(parents=True, exist_ok=True)
                write_manifest(out, "targets", **setup)
                write_index(out, [])
        except MlxEdgeError as error:
            problem = error
    first = ranks.gather(None if problem is None else str(problem))[0]
    if problem is not None:
        raise problem
    if first is not None:
        raise TargetsError(f"rank 0 stopped: {first}", "fix what rank 0 reports and start torchrun again")
    return done if ranks.main else read_index(out)


def _resume_point(out: Path, setup: dict, force: bool) -> list[dict]:
    """Completed shards to keep (resume), after checking `out` holds this very setup."""
    existing = read_manifest(out) if out.is_dir() else None
    if out.exists() and force:
        shutil.rmtree(out) if out.is_dir() else out.unlink()
        existing = None
    elif out.exists() and existing is None:
        if out.is_dir() and not any(out.iterdir()):
            existing = None
        else:
            raise TargetsError(f"{out} exists and is not a targets cache", "choose another --out, or --force")
    if existing is not None:
        if existing.get("kind") != "targets" or {k: existing.get(k) for k in setup} != setup:
            changed = sorted(k for k in setup if existing.get(k) != setup[k])
            raise SetupMismatch(
                f"{out} holds targets of another setup (differs in: {', '.join(changed)})",
                "pass --force to start over, or choose another --out",
            )
        shards = read_index(out)
        for shard in shards:
            if not (out / shard["file"]).is_file():
                raise TargetsError(f"{out / shard['file']} is missing", "pass --force to start over")
        # Of an interrupted write: ours, and safetensors' (its writer stages each file as .tmpXXXXXX beside it).
        temp_files = (".shard-*", ".index.json.*.tmp", f".{MANIFEST_NAME}.*.tmp", ".tmp??????")
        for stray in [p for pattern in temp_files for p in out.glob(pattern)]:
            stray.unlink()
        return shards
    return []


def _label_shard(forward, ids, rows, *, pad_id, batch_size, hidden_layers, attention_layers) -> dict:
    longest = max(len(ids[r]) for r in rows)
    n = len(rows)
    logits = None
    hidden = {k: None for k in hidden_layers}
    attention = {k: None for k in attention_layers}
    for batch in bucketed_batches(np.array([len(ids[r]) for r in rows]), batch_size, shuffle=False):
        input_ids, mask = collate([ids[rows[i]] for i in batch], pad_id=pad_id, multiple=1)
        out_logits, out_hidden, out_attn = forward(input_ids, mask, bool(hidden_layers), bool(attention_layers))
        width = input_ids.shape[1]
        if logits is None:
            logits = np.zeros((n, out_logits.shape[1]), np.float32)
        logits[batch] = out_logits
        for k in hidden_layers:
            if hidden[k] is None:
                hidden[k] = np.zeros((n, longest, out_hidden[k].shape[-1]), np.float16)
            hidden[k][batch, :width] = out_hidden[k]
        for k in attention_layers:
            if attention[k] is None:
                attention[k] = np.zeros((n, out_attn[k - 1].shape[1], longest, longest), np.float16)
            attention[k][batch, :, :width, :width] = out_attn[k - 1]
    tensors = {"logits": logits}
    tensors.update({f"hidden.{k}": v for k, v in hidden.items()})
    tensors.update({f"attention.{k}": v for k, v in attention.items()})
    return tensors


def _torch_forward(teacher: Path, device: str, attention_layers: list[int], local_rank: int = 0):
    import torch  # lazy: the MLX backend labels without torch

    placement = torch_placement(device)
    target = f"cuda:{local_rank}" if placement.device == "cuda" else placement.device  # one GPU per rank
    kwargs = {"attn_implementation": "eager"} if attention_layers else {}
    net = load_classifier(teacher, **kwargs).to(target).eval()

    def forward(input_ids, mask, want_hidden, want_attn):
        with torch.no_grad():
            out = net(
                input_ids=torch.from_numpy(input_ids).long().to(target),
                attention_mask=torch.from_numpy(mask).long().to(target),
                output_hidden_states=want_hidden,
                output_attentions=want_attn,
            )
        hidden = [h.float().cpu().numpy() for h in out.hidden_states] if want_hidden else None
        attn = [a.float().cpu().numpy() for a in out.attentions] if want_attn else None
        return out.logits.float().cpu().numpy(), hidden, attn

    return forward


def _mlx_forward(teacher: Path, device: str, batch_size: int):

    mlx_device(device)
    forward = BatchForward(load_model(teacher, require_head=True), batch_size=batch_size)  # CPU: a slice per core

    def run(input_ids, mask, want_hidden, want_attn):
        out = forward(
            input_ids, mask, output_hidden_states=want_hidden, output_attentions=want_attn, logits_only=True
        )  # logits_only: a [CLS]-pooled teacher's last layer for [CLS] alone, when no hidden states are kept
        hidden = [np.array(h) for h in out.hidden_states] if want_hidden else None
        attn = [np.array(a) for a in out.attentions] if want_attn else None
        return np.array(out.logits), hidden, attn

    return run
