"""Numeric alignment of a bundle: MLX student vs PyTorch mirror vs ONNX Runtime vs the converted
CoreML programs (run op by op in NumPy; on macOS also by CoreML itself), and extreme inputs."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from bridges.checks import TOLERANCES, CheckResult, max_abs, program_tolerance, within
from bridges.mil_numpy import run_program
from bridges.torch_mirror import run_mirror
from mlx_edge.metrics import softmax


@dataclass
class Backends:
    """Everything that computes the same function; None where unavailable."""

    seq: object  # bridges.coreml_export.SequenceLengths
    precision: str
    quantize: str
    encoder_program: object
    classifier_program: object | None  # None: the bundle has no Classifier.mlpackage (an extra)
    head: tuple[np.ndarray, np.ndarray]  # (W (N, H), b (N,)) as stored in Head.mlmodel
    onnx: object | None = None
    mirror: object | None = None
    student: object | None = None  # the MLX model

    @property
    def program_tol(self) -> float:
        return program_tolerance(self.precision)

    @property
    def reference(self) -> str | None:
        """The backend the programs are held to: the student's mirror, else ONNX Runtime, else none."""
        return "mirror" if self.mirror is not None else "onnx" if self.onnx is not None else None

    def run(self, ids: np.ndarray, mask: np.ndarray, *, with_mlx: bool = True) -> dict[str, dict]:
        """Outputs of each backend for one (1, L) example: {backend: {embedding, logits, probabilities}}."""
        return self.run_all([(ids, mask)], with_mlx=with_mlx)[0]

    def run_all(self, examples: list, *, with_mlx: bool = True, chunk: int = 16) -> list[dict[str, dict]]:
        """`run` for many examples; the reference backends take same-length examples as one batch."""
        outs: list[dict[str, dict]] = []
        w, b = self.head
        for ids, mask in examples:  # the programs take batch 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            enc = run_program(self.encoder_program, feeds)
            out = {
                "program": _outputs(enc["embedding"], enc["logits"]),
                "head": {"probabilities": softmax(enc["embedding"].astype(np.float64) @ w.T + b)},
            }
            if self.classifier_program is not None:
                out["classifier"] = {"probabilities": run_program(self.classifier_program, feeds)["probabilities"]}
            outs.append(out)
        backends = {}
        if self.mirror is not None:
            backends["mirror"] = lambda i, m: run_mirror(self.mirror, i, m)
        if self.onnx is not None:
            backends["onnx"] = self.onnx
        if with_mlx and self.student is not None:
            backends["mlx"] = self._run_mlx
        by_length: dict[int, list[int]] = {}
        for k, (ids, _) in enumerate(examples):
            by_length.setdefault(ids.shape[1], []).append(k)
        for rows in by_length.values():
            for start in range(0, len(rows), chunk):
                part = rows[start : start + chunk]
                ids = np.concatenate([examples[k][0] for k in part])
                mask = np.concatenate([examples[k][1] for k in part])
                for name, fn in backends.items():
                    emb, logits = fn(ids, mask)
                    for j, k in enumerate(part):
                        outs[k][name] = _outputs(emb[j : j + 1], logits[j : j + 1])
        return outs

    def _run_mlx(self, ids, mask):

        res = self.student(mx.array(ids), mx.array(mask))
        return np.array(res.pooled), np.array(res.logits)


def _outputs(embedding, logits) -> dict:
    return {"embedding": embedding, "logits": logits, "probabilities": softmax(logits)}


def encode(tokenizer, texts: list[str], seq) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each text as (1, L) int32 ids and mask, padded to the length the encoder takes for it."""
    examples = []
    for ids in tokenizer.encode_batch(texts, max_length=seq.max):
        length = seq.padded_length(len(ids))
        row = np.full((1, length), tokenizer.pad_id, np.int32)
        mask = np.zeros((1, length), np.int32)
        row[0, : len(ids)], mask[0, : len(ids)] = ids, 1
        examples.append((row, mask))
    return examples


def _pairs(b: Backends) -> list[tuple[str, str, str, float, tuple[str, ...]]]:
    """(check name, backend, reference, tolerance, compared outputs)."""
    ref = b.reference
    prog_keys = ("embedding", "logits")
    tol = b.program_tol
    if b.quantize != "none":  # compressed weights move outputs by more than rounding: compare probabilities
        prog_keys, tol = ("probabilities",), TOLERANCES[f"probs_{b.quantize}"]
    # the head (fp32 weights) on the program's embedding vs the program's own logits (maybe compressed)
    head_tol = (tol if b.quantize != "none" else b.program_tol) + TOLERANCES["head_vs_program"]
    pairs = [("parity.head", "head", "program", head_tol, ("probabilities",))]
    if b.classifier_program is not None and ref is not None:
        pairs.insert(0, ("parity.classifier.program", "classifier", ref, tol, ("probabilities",)))
    if ref is not None:
        pairs.insert(0, ("parity.encoder.program", "program", ref, tol, prog_keys))
    if b.mirror is not None:
        if b.onnx is not None:
            pairs.insert(0, ("parity.onnx", "onnx", "mirror", TOLERANCES["onnx_vs_mirror"], ("embedding", "logits")))
        if b.student is not None:
            pairs.insert(
                0, ("parity.mirror_vs_mlx", "mirror", "mlx", TOLERANCES["mirror_vs_mlx"], ("embedding", "logits"))
            )
    return pairs


def check_parity(b: Backends, examples: list[tuple[np.ndarray, np.ndarray]]) -> list[CheckResult]:
    """Max |difference| over the texts for each backend pair, and how often the top label agrees
    (a compressed program's agreement is held to its mode's floor, on the texts the reference decides)."""
    pairs = _pairs(b)
    worst = {p[0]: 0.0 for p in pairs}
    agree = {p[0]: np.zeros(2, int) for p in pairs}  # agreements on all texts, on the decided ones
    decided = {p[0]: 0 for p in pairs}
    for outs in b.run_all(examples):
        for name, backend, ref, _, keys in pairs:
            if backend not in outs or ref not in outs:
                continue
            d = max(max_abs(outs[backend][k], outs[ref][k]) for k in keys)
            worst[name] = d if not np.isfinite(d) else max(worst[name], d)
            same = int(np.argmax(outs[backend]["probabilities"]) == np.argmax(outs[ref]["probabilities"]))
            top2 = np.sort(np.ravel(outs[ref]["probabilities"]))[-2:]
            is_decided = top2.size < 2 or top2[1] - top2[0] > TOLERANCES["top1_tie_margin"]
            decided[name] += int(is_decided)
            agree[name] += (same, same * is_decided)
    results = []
    for name, backend, ref, tol, keys in pairs:
        d = worst[name]
        figures = {
            "max_abs_diff": d,
            "tolerance": tol,
            "compared": list(keys),
            "reference": ref,
            "texts": len(examples),
            "top1_agreement": agree[name][0] / max(len(examples), 1),
        }
        ok = within(d, tol)
        detail = f"{backend} vs {ref}: max |Δ| {d:.3g} over {len(examples)} texts ({'≤' if ok else '>'} {tol:g})"
        floor = _top1_floor(b, backend, ref)
        if floor is not None:  # a compressed program must also keep the reference's top label
            share = agree[name][1] / decided[name] if decided[name] else 1.0
            figures.update(decided_texts=decided[name], top1_agreement_decided=share, min_top1_agreement=floor)
            ok = ok and share >= floor
            detail += (
                f", top label agrees on {share:.0%} of the {decided[name]} texts the reference decides "
                f"({'≥' if share >= floor else '<'} {floor:.0%})"
            )
        results.append(CheckResult(name, ok, detail, figures))
    if b.reference is None:
        results.append(
            CheckResult(
                "parity.reference",
                True,
                "no reference: the student is not here and the bundle has no model.onnx, so the programs are "
                "only checked against themselves (pass --student, or export with --extras onnx)",
                skipped=True,
            )
        )
    elif b.mirror is None:
        results.append(CheckResult("parity.mirror", True, "student not found: ONNX is the reference", skipped=True))
    return results


def _top1_floor(b: Backends, backend: str, ref: str) -> float | None:
    """The share of texts on which a compressed program must give the reference's top label."""
    if b.quantize == "none" or backend not in ("program", "classifier") or ref not in ("mirror", "onnx"):
        return None
    return TOLERANCES[f"top1_{b.quantize}"]


EXTREME_TEXTS = {
    "empty_string": "",
    "emoji_mixed_scripts": "🚀🔥 买牛奶 and café ☕️ Привет مرحبا こんにちは 👨‍👩‍👧 ∑∞ 🇨🇳",
    "very_long_words": "a" * 300 + " " + "supercalifragilisticexpialidocious" * 8 + " 超" * 3,
}


def extreme_examples(tokenizer, seq) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The seeds' "all zeros, garbage" cases, at the encoder's lengths."""
    n = seq.max
    cases = {
        "all_padding": (np.full((1, n), tokenizer.pad_id, np.int32), np.zeros((1, n), np.int32)),
        "maximum_length": encode(tokenizer, ["finish the report " * n], seq)[0],
        "only_unknown_tokens": (
            np.array([[tokenizer.cls_id] + [tokenizer.unk_id] * (n - 2) + [tokenizer.sep_id]], np.int32),
            np.ones((1, n), np.int32),
        ),
    }
    for name, text in EXTREME_TEXTS.items():
        cases[name] = encode(tokenizer, [text], seq)[0]
    return cases


def check_extremes(b: Backends, cases: dict) -> list[CheckResult]:
    """Finite outputs, probabilities summing to 1, and the program still agreeing with the reference."""
    sum_tol = TOLERANCES["prob_sum_fp16" if b.precision == "fp16" else "prob_sum_fp32"]
    pairs = [p for p in _pairs(b) if p[0] != "parity.mirror_vs_mlx"]  # MLX masks with -inf-like values
    results = []
    names = list(cases)
    everything = b.run_all([cases[n] for n in names if n != "all_padding"])
    everything.insert(names.index("all_padding"), b.run(*cases["all_padding"], with_mlx=False))
    for case, outs in zip(names, everything):
        ids = cases[case][0]
        problems = []
        for backend, values in outs.items():
            for key, value in values.items():
                if not np.isfinite(value).all():
                    problems.append(f"{backend} {key} not finite")
            s = float(np.sum(values["probabilities"]))
            if not abs(s - 1.0) <= sum_tol:
                problems.append(f"{backend} probabilities sum to {s:.6g}")
        worst = 0.0
        # A fully masked row has no defined attention (fp16 rounds the -1e4 mask's differences away,
        # fp32 keeps them): finite and normalized is all that can be asked of it.
        for _, backend, ref, tol, keys in pairs if case != "all_padding" else ():
            if backend in outs and ref in outs:
                d = max(max_abs(outs[backend][k], outs[ref][k]) for k in keys)
                worst = max(worst, d) if np.isfinite(d) else d
                if not within(d, tol):
                    problems.append(f"{backend} vs {ref} max |Δ| {d:.3g} > {tol:g}")
        detail = (
            "; ".join(problems)
            if problems
            else "finite, probabilities sum to 1"
            + (f", max |Δ| {worst:.3g}" if case != "all_padding" else " (not compared across backends)")
        )
        results.append(
            CheckResult(f"extreme.{case}", not problems, detail, {"length": int(ids.shape[1]), "max_abs_diff": worst})
        )
    return results


def coreml_predict_available() -> bool:
    return sys.platform == "darwin"


def check_coreml_predict(bundle: Path, manifest: dict, b: Backends, examples: list) -> list[CheckResult]:
    """macOS only: real MLModel.predict of Encoder and Classifier with each compute unit vs the mirror."""
    if not coreml_predict_available():
        return [
            CheckResult(
                "coreml.predict",
                True,
                "CoreML prediction needs macOS; the MIL program was run in NumPy instead",
                skipped=True,
            )
        ]
    import coremltools as ct  # lazy: coremltools: ~4 s import, for conversion and checks only

    results = []
    ref = b.reference or "program"  # no reference: CoreML vs the same program run in NumPy
    for unit in ("CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE", "ALL"):
        try:
            enc = ct.models.MLModel(
                str(Path(bundle) / manifest["models"]["encoder"]["file"]), compute_units=getattr(ct.ComputeUnit, unit)
            )
            worst = 0.0
            for ids, mask in examples:
                got = enc.predict({"input_ids": ids, "attention_mask": mask})
                want = b.run(ids, mask, with_mlx=False)[ref]
                key = "probabilities" if b.quantize != "none" else "logits"
                value = softmax(got["logits"]) if key == "probabilities" else got["logits"]
                worst = max(worst, max_abs(value, want[key]))
        except Exception as exc:  # CoreML raises many kinds on load or predict
            results.append(CheckResult(f"coreml.predict.{unit}", False, f"{type(exc).__name__}: {exc}"))
            continue
        tol = b.program_tol if b.quantize == "none" else TOLERANCES[f"probs_{b.quantize}"]
        # the ANE computes in fp16 whatever the program says
        tol = max(tol, TOLERANCES["program_fp16"]) if unit in ("CPU_AND_NE", "ALL") else tol
        results.append(
            CheckResult(
                f"coreml.predict.{unit}",
                within(worst, tol),
                f"MLModel.predict vs {ref}: max |Δ| {worst:.3g} (tolerance {tol:g})",
                {"max_abs_diff": worst, "tolerance": tol},
            )
        )
    return results
