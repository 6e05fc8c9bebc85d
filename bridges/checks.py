"""Checks of an export bundle: each a small function returning `CheckResult`s; tolerances live here.

Structure checks (files, names/shapes/dtypes, weights) are in this file; numeric alignment and
extreme inputs in `check_numeric.py`; the updatable head in `check_head.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bridges.coreml_export import const_base, kept_float, load_spec, spec_features
from bridges.coreml_head import describe_head, load_head_spec
from bridges.onnx_export import describe_onnx
from mlx_edge.fileio import sha256_file

# Every tolerance of the bridge, in one place (max absolute difference unless noted).
TOLERANCES = {
    "mirror_vs_mlx": 1e-4,  # fp32 PyTorch mirror vs the MLX student
    "onnx_vs_mirror": 1e-4,  # ONNX Runtime (fp32) vs the mirror
    "program_fp32": 1e-3,  # the converted mlprogram, run by bridges.mil_numpy, vs the mirror
    "program_fp16": 2e-2,
    "head_vs_program": 1e-4,  # Head.mlmodel on the encoder program's embedding vs its own logits' probabilities (+ program tol)
    "prob_sum_fp32": 1e-4,  # |sum(probabilities) - 1|
    "prob_sum_fp16": 1e-2,
    # compressed programs: weights within a relative error (||w' - w|| / ||w||), probabilities within
    # (max |Δ| over the check texts), and the top label the reference's on at least this share of the
    # texts the reference decides (its two best labels more than top1_tie_margin apart: a near tie
    # flips on rounding alone)
    "weights_int8": 0.02,
    "weights_int8-block": 0.03,  # a trained pooler's outliers reached 0.013 (6x384 student, block 32)
    "weights_int4-block": 0.25,
    "weights_palettize": 0.25,
    "probs_int8": 0.05,
    # int8 in blocks is no coarser than int8 per channel, so the same limit: the demo's 4 x 288 student
    # (table split to 160) moved by 0.031 (blocks of 64, fp16) to 0.043 (fp32), its top label kept on 97-100%
    "probs_int8-block": 0.05,
    "probs_int4-block": 0.10,
    "probs_palettize": 0.15,
    "top1_int8": 0.95,
    "top1_int8-block": 0.95,
    "top1_int4-block": 0.9,
    "top1_palettize": 0.9,
    "top1_tie_margin": 0.02,
}
# coremltools.optimize leaves a weight of this many elements or fewer uncompressed (weight_threshold)
COMPRESS_THRESHOLD = 2048


@dataclass
class CheckResult:
    name: str  # dotted: "files.sha256", "parity.encoder.program", "head.loss", ...
    ok: bool
    detail: str = ""
    figures: dict = field(default_factory=dict)
    skipped: bool = False

    def __post_init__(self) -> None:
        # a comparison of NumPy numbers is a numpy.bool_: summed into a report's counts it made them
        # numpy.int64, which `check --json` could not print when such a check failed
        self.ok, self.skipped = bool(self.ok), bool(self.skipped)

    def to_dict(self) -> dict:
        return _jsonable(asdict(self))


def _jsonable(value):
    """Strict JSON (Swift's decoder refuses NaN/Infinity): non-finite numbers become strings."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else str(float(value))
    return value


def program_tolerance(precision: str) -> float:
    return TOLERANCES["program_fp16" if precision == "fp16" else "program_fp32"]


def max_abs(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def within(diff: float, tol: float) -> bool:
    return bool(np.isfinite(diff) and diff <= tol)


# --- files -----------------------------------------------------------------------------------


def bundle_files(bundle: Path) -> dict[str, dict]:
    """Every file of the bundle except manifest.json: relative path -> sha256 and size."""
    out = {}
    for path in sorted(p for p in Path(bundle).rglob("*") if p.is_file()):
        rel = path.relative_to(bundle).as_posix()
        if rel != "manifest.json":
            out[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return out


def check_files(bundle: Path, manifest: dict) -> list[CheckResult]:
    """sha256 and size of every file the manifest lists; files it does not list are reported."""
    listed = manifest.get("files", {})
    problems = []
    for rel, info in listed.items():
        path = Path(bundle) / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
            continue
        size = path.stat().st_size
        if size != info.get("bytes"):
            problems.append(f"{rel}: {size} bytes, manifest says {info.get('bytes')} (truncated or replaced)")
        elif sha256_file(path) != info.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest (modified)")
    extra = sorted(rel for rel in bundle_files(bundle) if rel not in listed)
    problems += [f"{rel}: not in the manifest" for rel in extra]
    detail = "; ".join(problems) if problems else f"{len(listed)} files match their sha256"
    return [CheckResult("files.sha256", not problems, detail, {"files": len(listed), "problems": len(problems)})]


# --- names, shapes, dtypes -------------------------------------------------------------------


def _compare_features(model: str, kind: str, declared: list[dict], actual: list[dict]) -> list[str]:
    problems = []
    actual_by_name = {f["name"]: f for f in actual}
    declared_names = [f["name"] for f in declared]
    if sorted(declared_names) != sorted(actual_by_name):
        problems.append(f"{model} {kind} names {sorted(actual_by_name)} != manifest {sorted(declared_names)}")
    for feature in declared:
        found = actual_by_name.get(feature["name"])
        if found is None:
            continue
        for key in ("shape", "dtype", "shape_range", "enumerated_shapes"):
            if key in feature or key in found:
                if feature.get(key) != found.get(key):
                    problems.append(
                        f"{model} {kind} {feature['name']}: {key} {found.get(key)} in the model, "
                        f"{feature.get(key)} in the manifest"
                    )
    return problems


def check_io(bundle: Path, manifest: dict) -> list[CheckResult]:
    """Input/output (and training-input) names, shapes and dtypes of every model vs the manifest."""
    results = []
    for key, entry in manifest["models"].items():
        path = Path(bundle) / entry["file"]
        try:
            if key == "onnx":
                info = describe_onnx(path)
                actual = {"inputs": info["inputs"], "outputs": info["outputs"]}
            elif key == "head":
                info = describe_head(load_head_spec(path))
                actual = {k: info[k] for k in ("inputs", "outputs", "training_inputs")}
            else:
                spec = load_spec(path)
                actual = {"inputs": spec_features(spec, "input"), "outputs": spec_features(spec, "output")}
        except Exception as exc:  # a damaged file: protobuf/onnx/coremltools raise many kinds
            results.append(CheckResult(f"io.{key}", False, f"{entry['file']} cannot be read: {exc}"))
            continue
        problems = []
        for kind, features in actual.items():
            problems += _compare_features(entry["file"], kind, entry.get(kind, []), features)
        detail = "; ".join(problems) if problems else "names, shapes and dtypes match the manifest"
        results.append(CheckResult(f"io.{key}", not problems, detail))
    return results


# --- weights ---------------------------------------------------------------------------------


def program_weight_map(constants: dict[str, np.ndarray], mirror_state: dict[str, np.ndarray]) -> dict[str, str]:
    """Program const name -> mirror parameter name, by the names the converter derives from PyTorch's."""
    by_flat = {name.replace(".", "_"): name for name in mirror_state}
    return {const: by_flat[const_base(const)] for const in constants if const_base(const) in by_flat}


def compare_weights(
    constants: dict[str, np.ndarray],
    mirror_state: dict[str, np.ndarray],
    *,
    precision: str,
    quantize: str,
    student_codes: set[str] | None = None,
) -> tuple[list[str], dict]:
    """The program's (decompressed) weights vs the student's: exact up to the storage dtype, or
    within the compression's relative error. `student_codes`: the program claims to hold these
    weights of a quantized student as its own codes: they must be compressed and, decompressed,
    equal the student's dequantized weights as exactly as an uncompressed weight. Returns (problems, figures)."""
    mapping = program_weight_map(constants, mirror_state)
    problems, worst = [], 0.0
    bound = TOLERANCES.get(f"weights_{quantize}")
    for const, name in sorted(mapping.items()):
        value = np.asarray(constants[const], np.float64)
        ref = np.asarray(mirror_state[name], np.float32)
        if value.shape != ref.shape:
            problems.append(f"{const}: shape {value.shape} != {name} {ref.shape}")
            continue
        stored = ref.astype(np.float16) if precision == "fp16" else ref
        is_compressed = const.endswith(("_quantized", "_palettized"))
        if student_codes is not None and is_compressed != (name in student_codes):
            state = "compressed" if is_compressed else "not compressed"
            problems.append(
                f"{const} is {state}; the student holds {name} {'as codes' if not is_compressed else 'as floats'}"
            )
        elif student_codes is not None:  # its codes or its floats (e.g. the classifier), as they are
            diff = float(np.max(np.abs(value - stored.astype(np.float64)))) if value.size else 0.0
            worst = max(worst, diff) if is_compressed else worst
            if not diff <= (2.0**-24 if precision == "fp16" else 0.0):
                what = "codes" if is_compressed else "weight"
                problems.append(f"{const} differs from the student's {what} {name} (max |Δ| {diff:.3g})")
        elif (
            quantize != "none"
            and not is_compressed
            and not kept_float(const)
            and ref.ndim >= 2
            and ref.size > COMPRESS_THRESHOLD
        ):
            # e.g. a block size that does not divide the weight: coremltools skips it without a word
            problems.append(f"{const} ({'x'.join(map(str, ref.shape))}) is not compressed ({quantize})")
        elif is_compressed:
            err = float(np.linalg.norm(value - ref) / max(np.linalg.norm(ref), 1e-12))
            worst = max(worst, err)
            if not err <= bound:
                problems.append(f"{const}: relative error {err:.3g} vs {name} exceeds {bound}")
        else:
            diff = float(np.max(np.abs(value - stored.astype(np.float64)))) if value.size else 0.0
            # fp16: coremltools may round a subnormal differently from NumPy (one step of 2**-24)
            if not diff <= (2.0**-24 if precision == "fp16" else 0.0):
                problems.append(f"{const} differs from the student's {name} (max |Δ| {diff:.3g})")
    figures = {"compared": len(mapping), "max_relative_error_compressed": worst}
    if student_codes is not None:  # `worst` is then the largest |Δ| of a decompressed weight: 0 when exact
        figures = {"compared": len(mapping), "student_codes": len(student_codes), "max_abs_diff_codes": worst}
    if not mapping:
        problems.append("no program constant could be matched to a student weight")
    return problems, figures


def check_weights(
    name: str, constants: dict, mirror_state: dict, *, precision: str, quantize: str, student_codes=None
) -> CheckResult:
    problems, figures = compare_weights(
        constants, mirror_state, precision=precision, quantize=quantize, student_codes=student_codes
    )
    detail = (
        "; ".join(problems[:4]) + (f" (+{len(problems) - 4} more)" if len(problems) > 4 else "")
        if problems
        else f"{figures['compared']} weights match the student's"
        + (f" ({len(student_codes)} of them its own codes, decompressed exactly)" if student_codes else "")
    )
    return CheckResult(f"weights.{name}", not problems, detail, figures)
