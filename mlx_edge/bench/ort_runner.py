"""Inference-only backends that run exported artifacts: ONNX Runtime (CPU) and CoreML (macOS).

Both export the PyTorch mirror that holds the benchmark's weights, the way `mlx-edge export` does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bridges.coreml_export import SequenceLengths, convert, save
from bridges.io_names import EMBEDDING, LOGITS
from bridges.onnx_export import export_onnx, ort_session
from bridges.torch_mirror import load_mirror, read_student_weights
from mlx_edge.bench.tasks import Task

UNSUPPORTED_TRAINING = "inference only (no training step)"


class OrtRunner:
    memory_kind = None  # ONNX Runtime's arena is not exposed; peak RSS covers it

    def __init__(self, spec, models, work: Path, *, threads: int):
        import onnxruntime as ort  # lazy: only when ONNX Runtime is benchmarked

        self.spec, self.models, self.work, self.ort, self.threads = spec, models, Path(work), ort, threads
        self._sessions = {}

    def info(self) -> dict:
        return {"version": self.ort.__version__, "device": "CPUExecutionProvider", "threads": self.threads}

    def supports(self, workload) -> str | None:
        return UNSUPPORTED_TRAINING if workload.trains else None

    def reset_peak(self) -> None:
        pass

    def device_peak(self) -> int | None:
        return None

    def _session_from(self, path: Path):
        return ort_session(path, threads=self.threads)  # no spinning: the next backend measures on those cores

    def session(self, which: str):
        if which not in self._sessions:
            directory = getattr(self.models, f"{which}_dir")
            mirror = load_mirror(read_student_weights(directory), getattr(self.models, which), source=directory)
            path = self.work / f"{which}.onnx"
            if not path.exists():
                export_onnx(mirror, path, example_length=8)
            self._sessions[which] = self._session_from(path)
        return self._sessions[which]

    def matmul(self, n: int):
        import onnx  # lazy: only when ONNX Runtime is benchmarked
        from onnx import TensorProto, helper  # lazy: only when ONNX Runtime is benchmarked

        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["c"])],
            "matmul",
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in "ab"],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
        )
        path = self.work / f"matmul{n}.onnx"
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8  # the newest onnx writes an IR version older runtimes refuse; opset 17 needs 8
        onnx.save(model, str(path))
        session = self._session_from(path)
        rng = np.random.default_rng(0)
        feeds = {x: rng.standard_normal((n, n), dtype=np.float32) for x in "ab"}
        return lambda: session.run(None, feeds)

    def build(self, workload, inputs: dict) -> Task:
        session = self.session("teacher" if workload.kind == "label" else "student")
        feeds = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}

        def logits():
            return session.run(["logits"], feeds)[0]

        return Task(lambda: {"logits": logits()}, logits)


def _load_mlmodel(path: Path, compute_units: str):
    """The saved program, ready to predict on `compute_units` (tests replace this off macOS)."""
    import coremltools as ct  # lazy: only when a CoreML backend is benchmarked (~4 s import)

    return ct.models.MLModel(str(path), compute_units=getattr(ct.ComputeUnit, compute_units))


class CoreMLRunner:
    """The mirror converted to an fp32 mlprogram (batch 1, lengths 2..max) and run per compute unit.

    fp32 so its numbers can be compared with the others at the same tolerance; the shipped bundle is
    fp16 by default. Batch 1 only: the bundle's encoder takes one text at a time.
    """

    memory_kind = None

    def __init__(self, spec, models, work: Path):
        import coremltools as ct  # lazy: only when a CoreML backend is benchmarked (~4 s import)

        self.spec, self.models, self.work, self.ct = spec, models, Path(work), ct
        self._models = {}

    def info(self) -> dict:
        return {"version": self.ct.__version__, "device": self.spec.device, "threads": None}

    def supports(self, workload) -> str | None:
        if workload.trains:
            return UNSUPPORTED_TRAINING
        if workload.batch != 1:
            return "batch 1 only (the bundle's encoder takes one text at a time)"
        return None

    def reset_peak(self) -> None:
        pass

    def device_peak(self) -> int | None:
        return None

    def matmul(self, n: int):
        return None  # no matmul-only program is built; roofline is left out for CoreML

    def model(self, which: str):
        if which not in self._models:
            directory = getattr(self.models, f"{which}_dir")
            config = getattr(self.models, which)
            path = self.work / f"{which}.mlpackage"
            if not path.exists():
                mirror = load_mirror(read_student_weights(directory), config, source=directory)
                seq = SequenceLengths("range", (2, config.max_position_embeddings))
                save(
                    convert(
                        mirror,
                        outputs=[EMBEDDING, LOGITS],
                        seq=seq,
                        precision="fp32",
                        min_target="iOS16",
                        compute_units=self.spec.device,
                    ),
                    path,
                )
            self._models[which] = _load_mlmodel(path, self.spec.device)
        return self._models[which]

    def build(self, workload, inputs: dict) -> Task:
        model = self.model("teacher" if workload.kind == "label" else "student")
        feeds = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}

        def logits():
            return np.asarray(model.predict(feeds)[LOGITS])

        return Task(lambda: {"logits": logits()}, logits)
