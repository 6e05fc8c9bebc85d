"""The teacher's refit: measured on a held-out dev split, then trained again on every labeled row.

Real tiny BERTs (tests/helpers/tiny.py) fine-tuned on the toy set; nothing is mocked."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlx_edge.manifest import MANIFEST_NAME, held_out_accuracy

MICRO = {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 24}


def _train(base_dir, train, out, dev=None, **settings):
    from mlx_edge.teacher.train import train_teacher

    lines = []
    kwargs = dict(epochs=2, learning_rate=1e-3, batch_size=16, head="probe") | settings
    result = train_teacher(
        model=str(base_dir), train=train, dev=dev, out=out, progress=False, on_epoch=lines.append, **kwargs
    )
    return result, lines


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_small_dev_split_is_measured_then_learned(base_dir, toy_data, tmp_path, backend):
    """240 rows, no dev file: a 24-row split keeps the last epoch, and `--refit yes` refits after it. The dev
    figures are the first fit's; the refit trains on all 240 rows, so at 15 steps per epoch (not 14) it
    reaches --min-steps 29 in 2 epochs where the first fit needed 3."""
    train, _ = toy_data
    out = tmp_path / "t"
    result, lines = _train(base_dir, train, out, min_steps=29, refit="yes", blend=1.0, backend=backend)
    first = [m for m in lines if not m.get("refit")]
    second = [m for m in lines if m.get("refit")]
    assert [m["epoch"] for m in first] == [0, 1, 2, 3]  # the probe, then 3 epochs of 14 steps
    assert [m["epoch"] for m in second] == [0, 1, 2]  # 2 epochs of 15 steps
    assert result.refit and result.epochs == 2
    assert result.dev_accuracy == first[-1]["dev_accuracy"]
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["refit"]["held_out"]["dev_rows"] == 24
    assert manifest["result"]["dev_accuracy"] == first[-1]["dev_accuracy"]
    assert held_out_accuracy(out) == (first[-1]["dev_accuracy"], 24)
    assert manifest["data"]["dev_fraction"] == 0.1  # distill still finds the split (and knows it was learned)
    assert not list(tmp_path.glob(".t.held-out")) and not list(tmp_path.glob(".*partial"))


def test_no_refit_with_a_dev_file_or_when_told(base_dir, toy_data, tmp_path):
    """`auto` with a dev file, and `no` with a small split: one fit, its own dev figures."""
    train, dev = toy_data
    result, lines = _train(base_dir, train, tmp_path / "a", dev, min_steps=0, refit="auto")  # 60 dev rows: last
    assert not result.refit and not any(m.get("refit") for m in lines)
    assert held_out_accuracy(tmp_path / "a") is None
    result, lines = _train(base_dir, train, tmp_path / "b", min_steps=0, refit="no")
    assert not result.refit and held_out_accuracy(tmp_path / "b") is None
    assert result.dev_accuracy == lines[-1]["dev_accuracy"]


def test_a_few_label_teacher_refits_and_blends_by_default(base_dir, toy_data, tmp_path):
    """The defaults (refit and blend "auto"), no dev file: 140 labeled rows (126 training rows, under
    FEW_LABELS_BELOW) train twice and are written as FEW_LABELS_BLEND of the fine-tune; the 240 rows of the
    toy set (216 training rows) train once, unblended. Given a dev file (60 rows, too few to choose an
    epoch on), the 140 all train, once, and are blended."""
    from mlx_edge.pipeline import teacher_blend
    from mlx_edge.settings import FEW_LABELS_BELOW, FEW_LABELS_BLEND

    train, dev = toy_data
    few = tmp_path / "few.jsonl"
    few.write_text("".join(train.read_text().splitlines(keepends=True)[:140]))
    assert 140 < FEW_LABELS_BELOW <= 216
    for data, dev_file, name, refit, share in (
        (few, None, "few", True, FEW_LABELS_BLEND),
        (train, None, "all", False, 1.0),
        (few, dev, "dev", False, FEW_LABELS_BLEND),
    ):
        out = tmp_path / name
        result, lines = _train(base_dir, data, out, dev_file, min_steps=0, head="auto")
        manifest = json.loads((out / MANIFEST_NAME).read_text())
        assert result.refit is refit and any(m.get("refit") for m in lines) is refit, name
        assert manifest["hyperparameters"]["blend"] == share, name
        assert teacher_blend(out) == share, name  # what the pipeline reads to choose the student's rate
        assert manifest["hyperparameters"]["head"] == "probe", name


def test_auto_blends_only_a_few_label_probe_teacher_that_does_not_self_train():
    from mlx_edge.settings import FEW_LABELS_BELOW, FEW_LABELS_BLEND
    from mlx_edge.teacher.train import resolve_blend

    few = dict(head="probe", train_rows=FEW_LABELS_BELOW - 1, last=True, self_trains=False)
    assert resolve_blend("auto", **few) == FEW_LABELS_BLEND
    assert resolve_blend("auto", **few | {"train_rows": FEW_LABELS_BELOW}) == 1.0
    assert resolve_blend("auto", **few | {"head": "new"}) == 1.0
    assert resolve_blend("auto", **few | {"last": False}) == 1.0  # a dev split big enough to choose on
    assert resolve_blend("auto", **few | {"self_trains": True}) == 1.0
    assert resolve_blend(0.5, **few | {"self_trains": True}) == 0.5  # a number is taken as given


def test_refit_yes_after_best_trains_the_best_epochs(base_dir, toy_data, tmp_path):
    """`--refit yes --select best` with a dev file: the refit runs as many epochs as the best one."""
    train, dev = toy_data
    result, lines = _train(base_dir, train, tmp_path / "t", dev, min_steps=0, epochs=3, select="best", refit="yes")
    first = [m for m in lines if not m.get("refit")]
    best = max(first, key=lambda m: (m["dev_accuracy"], m["dev_macro_f1"]))
    assert result.refit and result.epochs == max(1, best["epoch"])
    assert [m["epoch"] for m in lines if m.get("refit")] == list(range(result.epochs + 1))
    assert result.dev_accuracy == best["dev_accuracy"]


def test_calibration_reads_a_refit_teachers_first_fit(tmp_path):
    """distill's confidence in the teacher: on the split a refit teacher learned, its first fit's dev
    accuracy, smoothed as (right + 1) / (rows + 2); on other rows what it scores there."""
    from mlx_edge.distill.api import StudentRows, teacher_confidence, teacher_held_out

    pred, gold = np.array([0, 1, 1, 0]), np.array([0, 1, 1, 0])  # in-sample: all right
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"kind": "teacher", "refit": {"held_out": {
        "dev_accuracy": 0.7, "dev_rows": 10, "epoch": 3, "dev_macro_f1": 0.6}}}))  # fmt: skip
    split = StudentRows(None, None, None, "the teacher's split", (0.1, 0))
    other = tmp_path / "other-dev.jsonl"  # a dev file that is not the teacher's
    other.write_text("")
    elsewhere = StudentRows(None, None, other, str(other), None)
    assert teacher_confidence(pred, gold, teacher_held_out(tmp_path, split)) == pytest.approx(8 / 12)
    assert teacher_confidence(pred, gold, teacher_held_out(tmp_path, elsewhere)) == pytest.approx(5 / 6)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"kind": "teacher"}))
    assert teacher_confidence(pred, gold, teacher_held_out(tmp_path, split)) == pytest.approx(5 / 6)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_blended_teacher_is_the_mix_of_its_fine_tune_and_its_probe(base_dir, toy_data, tmp_path, backend):
    """WiSE-FT: the same seed and rows trained three times. blend 1 writes the fine-tuned weights, blend 0
    the probe it started as (the base model's body, the fitted head), and blend 0.25 a quarter of the
    first plus three quarters of the second, every trained tensor; dev judges what is written."""
    from safetensors.numpy import load_file

    train, dev = toy_data
    written, lines = {}, {}
    for share in (1.0, 0.0, 0.25):
        out = tmp_path / f"t{share}"
        _, lines[share] = _train(base_dir, train, out, dev, min_steps=0, select="last", blend=share, backend=backend)
        written[share] = load_file(str(out / "model.safetensors"))
    base = load_file(str(base_dir / "model.safetensors"))
    ft, probe, mix = written[1.0], written[0.0], written[0.25]
    moved = [k for k in ft if not np.allclose(ft[k], probe[k], atol=1e-6)]
    assert any("classifier" in k for k in moved) and any("encoder.layer" in k for k in moved)
    for key in moved:
        np.testing.assert_allclose(mix[key], 0.25 * ft[key] + 0.75 * probe[key], atol=2e-5, err_msg=key)
    body = [k for k in probe if "encoder.layer.0.attention.self.query.weight" in k]
    assert body and np.array_equal(probe[body[0]], next(v for k, v in base.items() if k.endswith(body[0][-40:])))
    assert lines[0.0][-1]["dev_accuracy"] == lines[0.0][0]["dev_accuracy"]  # the probe's, epoch 0


def test_distill_judges_a_refit_teacher_by_its_first_fit(base_dir, toy_data, tmp_path):
    """On the split a refit teacher went on to learn, distill's report and calibration take the first
    fit's dev accuracy from the manifest, not what the teacher scores on rows it learned. The manifest
    is then edited to say the first fit scored 50%: the report follows it, and the soft labels are
    softened to that confidence."""
    from mlx_edge.distill.api import distill
    from mlx_edge.distill.loop import LoopConfig

    train, _ = toy_data
    teacher = tmp_path / "t"
    _train(base_dir, train, teacher, min_steps=30, refit="yes")
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    common = dict(teacher=teacher, train=train, student=str(config), measure_speed=False, progress=False)
    loop = LoopConfig(epochs=1, batch_size=16, learning_rate=2e-3, seed=3)
    first = distill(out=tmp_path / "a", loop=loop, **common)
    held, rows = held_out_accuracy(teacher)
    assert first.teacher_dev_accuracy == held and rows == 24 and "split" in first.dev
    manifest = json.loads((teacher / MANIFEST_NAME).read_text())
    manifest["refit"]["held_out"]["dev_accuracy"] = 0.5
    (teacher / MANIFEST_NAME).write_text(json.dumps(manifest))
    halved = distill(out=tmp_path / "b", loop=loop, **common)
    assert halved.teacher_dev_accuracy == 0.5
    assert halved.soft_label_temperature > max(1.0, first.soft_label_temperature)


def test_a_teacher_refit_on_its_dev_file_is_judged_by_its_first_fit_there(base_dir, toy_data, tmp_path):
    """`--refit yes` with a dev file: distill, given no dev, is chosen on the teacher's dev file, rows the
    teacher then learned, so its report reads the first fit's accuracy (edited to 50% to tell them apart)."""
    from mlx_edge.distill.api import distill
    from mlx_edge.distill.loop import LoopConfig

    train, dev = toy_data
    teacher = tmp_path / "t"
    _train(base_dir, train, teacher, dev, min_steps=0, refit="yes")
    manifest = json.loads((teacher / MANIFEST_NAME).read_text())
    assert manifest["refit"]["held_out"]["dev_rows"] == 60
    manifest["refit"]["held_out"]["dev_accuracy"] = 0.5
    (teacher / MANIFEST_NAME).write_text(json.dumps(manifest))
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    report = distill(teacher=teacher, train=train, student=str(config), out=tmp_path / "s", measure_speed=False,
                     progress=False, loop=LoopConfig(epochs=1, batch_size=16, learning_rate=2e-3, seed=3))  # fmt: skip
    assert "dev file" in report.dev and report.teacher_dev_accuracy == 0.5
