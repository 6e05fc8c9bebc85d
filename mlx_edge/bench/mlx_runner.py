"""MLX on CPU, Metal or CUDA: the compiled forward, and the standard compiled training step."""

from __future__ import annotations

import contextlib
import ctypes
from functools import partial

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten

from mlx_edge.bench.tasks import Task
from mlx_edge.bench.workloads import CE_WEIGHT, KD_TEMPERATURE, LEARNING_RATE, WEIGHT_DECAY
from mlx_edge.distill import losses
from mlx_edge.models.checkpoint import load_model
from mlx_edge.runtime.blas import blas_info


def _mlx_device(name: str):
    """cpu -> mx.cpu; metal/cuda -> mx.gpu (tests replace this to run the GPU path on the CPU)."""

    return mx.cpu if name == "cpu" else mx.gpu


class MlxRunner:
    memory_kind = "MLX allocator high-water mark (mx.get_peak_memory), weights included"

    def __init__(self, spec, models):

        self.spec, self.models, self.mx = spec, models, mx
        self.device = _mlx_device(spec.device)

    @contextlib.contextmanager
    def on_device(self):
        mx = self.mx
        previous = mx.default_device()
        mx.set_default_device(self.device)
        try:
            yield
        finally:
            mx.set_default_device(previous)

    def info(self) -> dict:
        return {
            "version": self.mx.__version__,
            "device": str(self.device),
            "blas": blas_info().name if self.spec.device == "cpu" else None,
            "threads": _openblas_threads() if self.spec.device == "cpu" else None,
        }

    def supports(self, workload) -> str | None:
        return None

    # ----------------------------------------------------------------------------- memory
    def reset_peak(self) -> None:
        self.mx.clear_cache()
        self.mx.reset_peak_memory()

    def device_peak(self) -> int | None:
        return int(self.mx.get_peak_memory())

    # ----------------------------------------------------------------------------- tasks
    def _wrap(self, fn):
        def run(*args):
            with self.on_device():
                return fn(*args)

        return run

    def matmul(self, n: int):
        mx = self.mx
        with self.on_device():
            a = mx.random.normal((n, n), key=mx.random.key(0))
            b = mx.random.normal((n, n), key=mx.random.key(1))
            mx.eval(a, b)
        return self._wrap(lambda: mx.eval(a @ b))

    def build(self, workload, inputs: dict) -> Task:
        with self.on_device():
            if workload.kind in ("infer", "label"):
                return self._forward_task(workload, inputs)
            return self._train_task(workload, inputs)

    def _load(self, which: str):
        return load_model(getattr(self.models, f"{which}_dir"))

    def _forward_task(self, workload, inputs) -> Task:
        mx = self.mx
        model = self._load("teacher" if workload.kind == "label" else "student")
        ids, mask = mx.array(inputs["input_ids"]), mx.array(inputs["attention_mask"])
        forward = mx.compile(lambda i, m: model(i, m).logits, inputs=model.state)

        def step():
            mx.eval(forward(ids, mask))

        return Task(self._wrap(lambda: {"logits": np.array(forward(ids, mask))}), self._wrap(step))

    def _train_task(self, workload, inputs) -> Task:

        mx = self.mx
        model = self._load("student")
        model.train()
        ids, mask, y = (mx.array(inputs[k]) for k in ("input_ids", "attention_mask", "labels"))
        kd = workload.kind != "train"

        def loss_fn(model, i, m, labels, teacher_logits):
            logits = model(i, m).logits
            if not kd:
                return losses.hard_label_ce(logits, labels)
            return losses.soft_target_kl(logits, teacher_logits, KD_TEMPERATURE) + CE_WEIGHT * losses.hard_label_ce(
                logits, labels
            )

        value_and_grad = nn.value_and_grad(model, loss_fn)
        optimizer = optim.AdamW(learning_rate=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
        optimizer.init(model.trainable_parameters())
        state = [model.state, optimizer.state, mx.random.state]

        @partial(mx.compile, inputs=state, outputs=state)
        def train_step(i, m, labels, teacher_logits):
            loss, grads = value_and_grad(model, i, m, labels, teacher_logits)
            optimizer.update(model, grads)
            return loss

        teacher_logits = self._teacher_logits(workload, ids, mask)

        def check():
            loss, grads = value_and_grad(model, ids, mask, y, teacher_logits())
            norm = mx.sqrt(sum((g.astype(mx.float32) ** 2).sum() for _, g in tree_flatten(grads)))
            return {"loss": np.array(loss), "grad_norm": np.array(norm)}

        def step():
            loss = train_step(ids, mask, y, teacher_logits())
            mx.eval(state, loss)

        return Task(self._wrap(check), self._wrap(step))

    def _teacher_logits(self, workload, ids, mask):
        """A function giving the teacher's logits: live (distill), precomputed (distill-cached), none (train)."""
        mx = self.mx
        if workload.kind == "train":
            zeros = mx.zeros((ids.shape[0], self.models.student.num_labels))
            return lambda: zeros
        teacher = self._load("teacher")
        forward = mx.compile(lambda i, m: teacher(i, m).logits, inputs=teacher.state)
        if workload.kind == "distill-cached":
            cached = forward(ids, mask)
            mx.eval(cached)
            return lambda: cached
        return lambda: forward(ids, mask)


def _openblas_threads() -> int | None:

    try:
        return int(ctypes.CDLL(None).openblas_get_num_threads())
    except (AttributeError, OSError):
        return None
