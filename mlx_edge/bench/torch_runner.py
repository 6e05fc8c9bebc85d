"""PyTorch on CPU, CUDA or MPS, running the mirror (bridges.torch_mirror) with the same weights."""

from __future__ import annotations

import os

from bridges.torch_mirror import load_mirror, read_student_weights
from mlx_edge.bench.tasks import Task
from mlx_edge.bench.workloads import CE_WEIGHT, KD_TEMPERATURE, LEARNING_RATE, WEIGHT_DECAY


def _torch_device(name: str):
    """The torch.device for a backend (tests replace this to run the CUDA/MPS path on the CPU)."""
    import torch  # lazy: only when a PyTorch backend is benchmarked

    return torch.device(name)


class TorchRunner:
    def __init__(self, spec, models, *, threads: int):
        import torch  # lazy: only when a PyTorch backend is benchmarked

        self.spec, self.models, self.torch = spec, models, torch
        if spec.device == "mps":  # ops MPS lacks fall back to the CPU instead of failing
            os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")
        torch.set_num_threads(threads)
        self.device = _torch_device(spec.device)
        self._weights = {}

    @property
    def memory_kind(self) -> str | None:
        return {
            "cuda": "torch.cuda.max_memory_allocated (tensors, weights included)",
            "mps": "torch.mps.driver_allocated_memory after the workload (not a peak)",
        }.get(self.spec.device)

    def info(self) -> dict:
        return {"version": self.torch.__version__, "device": str(self.device), "threads": self.torch.get_num_threads()}

    def supports(self, workload) -> str | None:
        return None

    def sync(self) -> None:
        if self.spec.device == "cuda":
            self.torch.cuda.synchronize()
        elif self.spec.device == "mps":
            self.torch.mps.synchronize()

    # ----------------------------------------------------------------------------- memory
    def reset_peak(self) -> None:
        if self.spec.device == "cuda":
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()
        elif self.spec.device == "mps":
            self.torch.mps.empty_cache()

    def device_peak(self) -> int | None:
        if self.spec.device == "cuda":
            return int(self.torch.cuda.max_memory_allocated())
        if self.spec.device == "mps":
            return int(self.torch.mps.driver_allocated_memory())
        return None

    # ----------------------------------------------------------------------------- tasks
    def matmul(self, n: int):
        torch = self.torch
        g = torch.Generator().manual_seed(0)
        a, b = (torch.randn(n, n, generator=g).to(self.device) for _ in range(2))

        def step():
            with torch.no_grad():
                a @ b
            self.sync()

        return step

    def _load(self, which: str):
        directory = getattr(self.models, f"{which}_dir")
        if which not in self._weights:
            self._weights[which] = read_student_weights(directory)
        return load_mirror(self._weights[which], getattr(self.models, which), source=directory).to(self.device)

    def _tensors(self, inputs):
        t = self.torch
        ids, mask = (t.from_numpy(inputs[k]).to(self.device) for k in ("input_ids", "attention_mask"))
        return ids, mask, t.from_numpy(inputs["labels"]).long().to(self.device)

    def build(self, workload, inputs: dict) -> Task:
        if workload.kind in ("infer", "label"):
            return self._forward_task(workload, inputs)
        return self._train_task(workload, inputs)

    def _forward_task(self, workload, inputs) -> Task:
        torch = self.torch
        model = self._load("teacher" if workload.kind == "label" else "student")
        ids, mask, _ = self._tensors(inputs)

        def forward():
            with torch.inference_mode():
                return model(ids, mask)[1]

        def step():
            forward()
            self.sync()

        return Task(lambda: {"logits": forward().float().cpu().numpy()}, step)

    def _train_task(self, workload, inputs) -> Task:
        torch = self.torch
        F = torch.nn.functional
        model = self._load("teacher" if workload.kind == "teacher-train" else "student").train()
        ids, mask, y = self._tensors(inputs)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
        teacher_logits = self._teacher_logits(workload, ids, mask)
        t = KD_TEMPERATURE

        def loss_value():
            logits = model(ids, mask)[1]
            ce = F.cross_entropy(logits, y)
            if workload.kind in ("train", "teacher-train"):
                return ce
            # KL(teacher || student) of the softened distributions, batch mean, times T² (as in MLX)
            kd = F.kl_div(
                F.log_softmax(logits / t, -1),
                F.log_softmax(teacher_logits() / t, -1),
                reduction="batchmean",
                log_target=True,
            ) * (t * t)
            return kd + CE_WEIGHT * ce

        def check():  # dropout off, as on every backend; the timed steps train with it
            model.eval()
            try:
                optimizer.zero_grad(set_to_none=True)
                loss = loss_value()
                loss.backward()
                norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in model.parameters() if p.grad is not None))
                optimizer.zero_grad(set_to_none=True)
                return {"loss": loss.detach().cpu().numpy(), "grad_norm": norm.cpu().numpy()}
            finally:
                model.train()

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss_value().backward()
            optimizer.step()
            self.sync()

        return Task(check, step)

    def _teacher_logits(self, workload, ids, mask):
        torch = self.torch
        if workload.kind in ("train", "teacher-train"):
            return lambda: None
        teacher = self._load("teacher")

        def forward():
            with torch.no_grad():
                return teacher(ids, mask)[1]

        if workload.kind == "distill":  # the teacher's logits computed once, as a targets cache holds them
            cached = forward()
            return lambda: cached
        return forward
