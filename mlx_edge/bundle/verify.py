"""The checks of a bundle's models themselves, shared by `export` (before the manifest is written)
and `check`: op coverage, weights, the updatable head, parity across MLX / PyTorch mirror / ONNX
Runtime / the mlprogram run in NumPy, extreme inputs, CoreML predict on macOS, a simulated update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bridges.check_head import check_head_spec, check_update
from bridges.check_numeric import Backends, check_coreml_predict, check_extremes, check_parity, encode, extreme_examples
from bridges.checks import CheckResult, check_weights
from bridges.coreml_head import describe_head, head_weights, load_head_spec
from bridges.mil_numpy import load_program, op_types, program_constants, run_program, unsupported_ops
from bridges.onnx_export import OnnxRunner, check_onnx
from bridges.torch_mirror import load_mirror, read_student_weights
from mlx_edge.bundle.layout import sequence_lengths, weights_sha256
from mlx_edge.data import read_labeled
from mlx_edge.datasets import todo_split
from mlx_edge.errors import BundleError, MlxEdgeError
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.quantized import cpu_float, quantized_weight_names

UPDATE_EXAMPLES = 8


@dataclass
class CheckReport:
    bundle: str
    results: list = field(default_factory=list)  # bridges.checks.CheckResult

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> list:
        return [r for r in self.results if not r.ok]

    def to_dict(self) -> dict:
        return {
            "bundle": self.bundle,
            "ok": self.ok,
            "passed": sum(r.ok and not r.skipped for r in self.results),
            "failed": len(self.failed),
            "skipped": sum(r.skipped for r in self.results),
            "results": [r.to_dict() for r in self.results],
        }


def default_texts(n: int) -> list[str]:
    """`n` texts of the shipped to-do dev split (Chinese and English), evenly spread."""
    texts = read_labeled(todo_split("dev")).texts
    step = max(len(texts) // max(n, 1), 1)
    return texts[::step][:n]


def load_student(manifest: dict, student_dir: Path | None):
    path = Path(student_dir) if student_dir is not None else Path(manifest["student"]["path"])
    if not (path / "config.json").is_file():
        if student_dir is not None:
            raise BundleError(f"--student {path} is not a model directory", "pass the student the bundle came from")
        return (
            None,
            None,
            CheckResult(
                "student",
                True,
                f"{path} not found: MLX/mirror parity and weight checks "
                "skipped, ONNX Runtime is the reference (pass --student)",
                skipped=True,
            ),
        )
    if weights_sha256(path) != manifest["student"]["weights_sha256"]:
        return (
            None,
            None,
            CheckResult(
                "student", False, f"{path} has other weights than the bundle was exported from (sha256 differs)"
            ),
        )
    student = load_model(path, require_head=True)
    mirror = load_mirror(read_student_weights(path), student.config, source=path)
    return student, mirror, CheckResult("student", True, f"{path} (weights sha256 match the manifest)")


def verify_artifacts(bundle: Path, manifest: dict, *, student, mirror, tokenizer, texts: list[str]) -> list:
    """The checks of the models themselves (shared by `export`, before the manifest is written).
    The extras (classifier, ONNX) are checked when the manifest names them, and not missed otherwise."""
    bundle = Path(bundle)
    models = manifest["models"]
    results, programs = [], {}
    for key in (k for k in ("encoder", "classifier") if k in models):
        program, program_results = _load_program(bundle, manifest, key, mirror, student)
        results += program_results
        if program is not None:
            programs[key] = program
    head, head_results = _load_head(bundle, models["head"], mirror)
    results += head_results
    onnx = None
    if "onnx" in models:
        try:
            check_onnx(bundle / models["onnx"]["file"])
            onnx = OnnxRunner(bundle / models["onnx"]["file"])
            results.append(CheckResult("onnx.checker", True, "onnx.checker (full check) passes; ONNX Runtime loads it"))
        except MlxEdgeError as exc:
            results.append(CheckResult("onnx.checker", False, str(exc)))
    if "encoder" not in programs or head is None or ("classifier" in models and "classifier" not in programs):
        results.append(CheckResult("parity", False, "not run: a model above could not be loaded or evaluated"))
        return results

    head_info, w, b = head
    backends = Backends(
        seq=sequence_lengths(manifest),
        precision=manifest["precision"],
        quantize=_parity_mode(manifest),
        encoder_program=programs["encoder"],
        classifier_program=programs.get("classifier"),
        head=(w, b),
        onnx=onnx,
        mirror=mirror,
        student=None if student is None else cpu_float(student),  # the same numbers as its MLX CPU int4 kernels, faster
    )
    examples = encode(tokenizer, texts, backends.seq)
    try:
        results += check_parity(backends, examples)
        results += check_extremes(backends, extreme_examples(tokenizer, backends.seq))
        embeddings = np.concatenate(
            [
                run_program(programs["encoder"], {"input_ids": i, "attention_mask": m})["embedding"]
                for i, m in examples[:UPDATE_EXAMPLES]
            ]
        ).astype(np.float64)
    except MlxEdgeError as exc:  # e.g. an op the interpreter covers, in a variant it does not
        results.append(CheckResult("parity", False, f"the program could not be evaluated: {exc}"))
        return results
    results += check_coreml_predict(bundle, manifest, backends, examples[:4])
    results.append(check_update(head_info, w, b, embeddings, manifest["labels"]))
    return results


def _parity_mode(manifest: dict) -> str:
    """The mode whose tolerances parity applies. A program holding the student's own codes computes the
    quantized student's function: it is held to the float tolerances, against the student, not to the
    looser ones of a weight rounded again by coremltools."""
    q = manifest["quantize"]
    return "none" if q.get("codes") == "student" else q["mode"]


def _load_program(bundle: Path, manifest: dict, key: str, mirror, student=None) -> tuple[object | None, list]:
    """The MIL program of models[key] if the NumPy interpreter covers every op of it, with the
    results of loading it, of its op coverage and (with the student) of its weights."""
    entry = manifest["models"][key]
    try:
        program = load_program(bundle / entry["file"])
    except Exception as exc:  # a damaged package: coremltools/protobuf raise many kinds
        return None, [CheckResult(f"load.{key}", False, f"{entry['file']} cannot be loaded: {exc}")]
    unknown = unsupported_ops(program)
    results = [
        CheckResult(
            f"program.ops.{key}",
            not unknown,
            f"op type(s) the NumPy interpreter does not cover: {', '.join(unknown)}"
            if unknown
            else f"all {len(op_types(program))} op types covered",
            {"op_types": op_types(program)},
        )
    ]
    if unknown:
        return None, results
    if mirror is not None:
        state = {k: v.numpy() for k, v in mirror.state_dict().items()}
        constants = program_constants(program)
        results.append(
            check_weights(
                key,
                constants,
                state,
                precision=manifest["precision"],
                quantize=manifest["quantize"]["mode"],
                student_codes=_student_codes(manifest, student),
            )
        )
    return program, results


def _student_codes(manifest: dict, student) -> set[str] | None:
    """The weights the student holds as codes, when the bundle says its programs hold them as they are."""
    if manifest["quantize"].get("codes") != "student":
        return None
    return set() if student is None else set(quantized_weight_names(student))


def _load_head(bundle: Path, entry: dict, mirror) -> tuple[tuple | None, list]:
    """((description, W, b) of Head.mlmodel or None, results of reading it, its spec, its weights)."""
    try:
        head_spec = load_head_spec(bundle / entry["file"])
        head_info = describe_head(head_spec)
        w, b = head_weights(head_spec)
    except Exception as exc:  # a damaged .mlmodel is a protobuf DecodeError, or has no innerProduct
        return None, [CheckResult("load.head", False, f"{entry['file']} cannot be read: {exc}")]
    results = check_head_spec(head_info, entry)
    if mirror is not None:
        ref_w = mirror.classifier.weight.detach().numpy()
        ref_b = mirror.classifier.bias.detach().numpy()
        same = w.shape == ref_w.shape and np.array_equal(w, ref_w) and np.array_equal(b, ref_b)
        results.append(
            CheckResult(
                "head.weights",
                same,
                "innerProduct weights equal the student's classifier"
                if same
                else "the head's weights differ from the student's classifier",
            )
        )
    return (head_info, w, b), results
