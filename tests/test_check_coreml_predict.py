"""CoreML's own prediction of the exported programs (macOS only; elsewhere the MIL program runs in
NumPy, see test_mil_numpy). A random tiny student stands in for a distilled one until distill lands."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.helpers.exports import exported, tiny_student

pytestmark = pytest.mark.skipif(
    sys.platform != "darwin", reason="CoreML prediction needs macOS (coremltools cannot predict on Linux)"
)


@pytest.mark.parametrize("unit", ["CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE", "ALL"])
def test_encoder_predict_matches_the_mirror(unit):
    import coremltools as ct

    from bridges.torch_mirror import load_mirror, read_student_weights, run_mirror
    from mlx_edge.models.checkpoint import load_config

    bundle = exported("--precision", "fp16")
    model = ct.models.MLModel(str(bundle / "Encoder.mlpackage"), compute_units=getattr(ct.ComputeUnit, unit))
    mirror = load_mirror(read_student_weights(tiny_student()), load_config(tiny_student()))
    ids = np.zeros((1, 32), np.int32)
    ids[0, :5] = [2, 40, 41, 42, 3]
    mask = (ids != 0).astype(np.int32)
    got = model.predict({"input_ids": ids, "attention_mask": mask})
    emb, logits = run_mirror(mirror, ids, mask)
    np.testing.assert_allclose(got["logits"], logits, atol=2e-2)
    np.testing.assert_allclose(got["embedding"], emb, atol=2e-2)


def test_check_runs_coreml_predict_per_compute_unit():
    from mlx_edge.check import check_bundle

    report = check_bundle(exported("--precision", "fp16"), n_texts=4)
    names = {r.name for r in report.results if r.name.startswith("coreml.predict.")}
    assert names == {f"coreml.predict.{u}" for u in ("CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE", "ALL")}
    assert report.ok, [r for r in report.results if not r.ok]


def test_head_is_updatable_by_coreml(tmp_path):
    import coremltools as ct

    model = ct.models.MLModel(str(exported("--precision", "fp16") / "Head.mlmodel"))
    assert model.get_spec().isUpdatable
    out = model.predict({"embedding": np.zeros(32, np.float32)})
    assert abs(float(np.sum(out["probs"])) - 1.0) < 1e-4
