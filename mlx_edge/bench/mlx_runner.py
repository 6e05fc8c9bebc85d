"""MLX on CPU, Metal or CUDA: the compiled forward, and the standard compiled training step."""

from __future__ import annotations

import contextlib
import ctypes

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from mlx_edge.bench.tasks import Task
from mlx_edge.bench.workloads import CE_WEIGHT, KD_TEMPERATURE, LEARNING_RATE, WEIGHT_DECAY
from mlx_edge.distill.config import TERMS, LoopConfig, Schedule
from mlx_edge.distill.loop import make_batch
from mlx_edge.distill.providers import live_targets
from mlx_edge.distill.step import Trainable, TrainStep
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.inference import BatchForward, Latency, path_settings
from mlx_edge.runtime.blas import blas_info
from mlx_edge.runtime.cpu_streams import blas_limit


def _mlx_device(name: str):
    """cpu -> mx.cpu; metal/cuda -> mx.gpu (tests replace this to run the GPU path on the CPU)."""

    return mx.cpu if name == "cpu" else mx.gpu


class MlxRunner:
    memory_kind = "MLX allocator high-water mark (mx.get_peak_memory), weights included"

    def __init__(self, spec, models):

        self.spec, self.models, self.mx = spec, models, mx
        self.device = _mlx_device(spec.device)
        self.path: dict[str, str] = {}  # workload name -> the product path and settings it ran

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
        """The product's inference paths: `teacher label --backend mlx` / dev evaluation / predict
        (BatchForward) for batches, the compiled single-sentence path (Latency) for batch 1."""
        model = self._load("teacher" if workload.kind == "label" else "student")
        model.eval()
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        forward = Latency(model) if workload.batch == 1 else BatchForward(model, batch_size=workload.batch)
        self.path[workload.name] = forward.settings().describe()
        run = forward if workload.batch == 1 else forward.logits
        return Task(self._wrap(lambda: {"logits": run(ids, mask)}), self._wrap(lambda: run(ids, mask)))

    def _train_task(self, workload, inputs) -> Task:
        """`mlx-edge distill`'s own step (distill/step.py TrainStep: shards over CPU streams, compiled,
        clipped AdamW) with the bench's losses: CE (train; teacher-train, the step `teacher train
        --backend mlx` runs), KD + CE from a cache (distill), or with the teacher's forward live on the
        same streams (distill-live, as distill without a cache)."""
        model = self._load("teacher" if workload.kind == "teacher-train" else "student")
        kd = workload.kind in ("distill", "distill-live")
        terms_on = {"kd", "ce"} if kd else {"ce"}
        loop = LoopConfig(
            batch_size=workload.batch,
            learning_rate=LEARNING_RATE,
            weight_decay=WEIGHT_DECAY,
            temperature=KD_TEMPERATURE,
            warmup_ratio=0.0,
            weights={"kd": Schedule(1.0 if kd else 0.0), "ce": Schedule(CE_WEIGHT if kd else 1.0)},
        )
        trainable = Trainable(model, self.models.teacher.hidden_size, with_hidden=False, with_embedding=False)
        trainable.train()
        train_step = TrainStep(trainable, loop, {}, terms_on, total_steps=10**6)
        w = mx.array([loop.weights_at(0, 0.0)[k] for k in TERMS])
        ids, mask, labels = inputs["input_ids"], inputs["attention_mask"], inputs["labels"]
        rows = np.arange(len(ids))
        targets = self._teacher_targets(workload, terms_on, train_step.shards)

        def batch():
            return make_batch(rows, ids, mask, labels, targets(rows, ids, mask), terms_on)

        def check():  # dropout off: the one deterministic step every backend must agree on
            trainable.eval()
            try:
                (loss, _), grads = train_step.loss_and_grad(trainable, batch(), w)
                norm = mx.sqrt(sum((g.astype(mx.float32) ** 2).sum() for _, g in tree_flatten(grads)))
                return {"loss": np.array(loss), "grad_norm": np.array(norm)}
            finally:
                trainable.train()

        def step():
            b = batch()
            parts = train_step.split(b, mask)
            with blas_limit(len(parts)):
                mx.eval(b)  # live teacher targets, on the same streams (as run_loop does)
                train_step(parts, w)

        self.path[workload.name] = (
            "distill TrainStep, " + path_settings(model, shards=train_step.shards, compiled=True).describe()
        )
        return Task(self._wrap(check), self._wrap(step))

    def _teacher_targets(self, workload, terms_on, shards):
        """What the step learns from, as distill's providers give it: none, a cache, or the live teacher."""
        if workload.kind in ("train", "teacher-train"):
            zeros = np.zeros((workload.batch, self.models.student.num_labels), np.float32)
            return lambda rows, ids, mask: {"logits": zeros}
        teacher = self._load("teacher")
        teacher.eval()
        if workload.kind == "distill-live":
            return live_targets(teacher, {}, terms_on, shards)
        forward = BatchForward(teacher, batch_size=workload.batch)
        cached = {}  # the teacher's logits computed once, as a targets cache holds them

        def from_cache(rows, ids, mask):
            if "logits" not in cached:
                cached["logits"] = forward.logits(ids, mask)
            return cached

        return from_cache


def _openblas_threads() -> int | None:

    try:
        return int(ctypes.CDLL(None).openblas_get_num_threads())
    except (AttributeError, OSError):
        return None
