"""`[distill] calibrate`: an over-confident teacher's soft labels are softened to its dev accuracy
before a student learns them (issue 29: a teacher fitted to 300 rows is certain of everything, its
student learns the same steep logits, and the student's int8 bundle fails its check)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.data import LabelMap, read_labeled
from mlx_edge.distill.api import distill
from mlx_edge.distill.loop import LoopConfig
from mlx_edge.metrics import smoothed_accuracy, softening_temperature

MICRO = {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 24}


def _top(logits: np.ndarray, t: float = 1.0) -> float:
    z = np.asarray(logits, np.float64) / t
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return float((p / p.sum(axis=1, keepdims=True)).max(axis=1).mean())


def test_an_over_confident_teacher_is_softened_to_the_confidence_asked_for():
    rng = np.random.default_rng(0)
    sure = rng.normal(size=(40, 4)) * 25  # certain of nearly every row
    assert _top(sure) > 0.95
    t = softening_temperature(sure, 0.8)
    assert t > 1.0
    assert _top(sure, t) == pytest.approx(0.8, abs=1e-6)
    # only the scale matters: twice the logits, twice the temperature
    assert softening_temperature(sure * 2, 0.8) == pytest.approx(2 * t, rel=1e-6)
    assert smoothed_accuracy(np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0])) == pytest.approx(4 / 6)


def test_a_teacher_no_more_sure_than_right_is_left_alone():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(30, 3)) * 0.3  # top probability about 0.45
    assert softening_temperature(logits, 0.9) == 1.0
    assert softening_temperature(np.zeros((0, 3)), 0.5) == 1.0  # no rows: nothing to soften


@pytest.fixture(scope="module")
def sure_teacher(trained_teacher, tmp_path_factory):
    """The toy teacher with its head's weights and bias times 1,000: the same predictions (its logits were near 0.05), certain of each."""
    import mlx.core as mx

    from mlx_edge.models.checkpoint import load_model, save_model

    model = load_model(trained_teacher, require_head=True)
    model.classifier.weight = model.classifier.weight * 1000
    model.classifier.bias = model.classifier.bias * 1000
    mx.eval(model.parameters())
    out = tmp_path_factory.mktemp("sure") / "teacher"
    save_model(model, out, tokenizer_from=trained_teacher)
    return out


def _dev_logits(teacher, dev_path):
    from mlx_edge.models.checkpoint import load_model
    from mlx_edge.models.inference import predict_ids
    from mlx_edge.models.tokenizer import load_tokenizer

    model = load_model(teacher, require_head=True)
    tokenizer = load_tokenizer(teacher)
    data = read_labeled(dev_path)
    ids = [np.asarray(x, np.int32) for x in tokenizer.encode_batch(data.texts, max_length=128)]
    return predict_ids(model, ids, tokenizer.pad_id)[0], LabelMap(model.config.labels).encode(data.labels)


def _assert_softened_to_dev_accuracy(teacher, train, dev, temperature: float) -> None:
    """The temperature brings the teacher's mean top probability on the rows the student learns down to
    its smoothed dev accuracy. Not a fixed figure: the toy teacher's margins, so the temperature, differ
    from one CPU to another (4.7 on CI's machine, 10.6 on the development one)."""
    dev_logits, gold = _dev_logits(teacher, dev)
    confidence = (int((dev_logits.argmax(axis=1) == gold).sum()) + 1) / (len(gold) + 2)
    learned, _ = _dev_logits(teacher, train)  # the rows the student learns (all 240 of them)
    assert _top(learned) > confidence  # over-confident, so there is something to soften
    assert temperature > 1.0
    assert _top(learned, temperature) == pytest.approx(confidence, abs=1e-4)


def test_distill_softens_a_sure_teacher_for_the_student(sure_teacher, toy_data, tmp_path, monkeypatch):
    """The loop is handed the teacher's logits divided by the temperature; the report says which. The
    loop itself is the real one: the spy only reads the targets of the first rows before it runs."""
    from mlx_edge.data import collate
    from mlx_edge.distill import api

    seen = []
    real_loop = api.run_loop

    def spy(**kw):
        rows = np.arange(8)
        ids, mask = collate([kw["train_ids"][i] for i in rows], pad_id=kw["pad_id"])
        seen.append(np.array(kw["targets"](rows, ids, mask)["logits"], np.float64))
        return real_loop(**kw)

    monkeypatch.setattr(api, "run_loop", spy)
    train, dev = toy_data
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    common = dict(teacher=sure_teacher, train=train, dev=dev, student=str(config), measure_speed=False, progress=False)
    loop = dict(epochs=1, batch_size=16, learning_rate=2e-3, seed=3)
    soft = distill(out=tmp_path / "soft", loop=LoopConfig(**loop), **common)
    raw = distill(out=tmp_path / "raw", loop=LoopConfig(**loop, calibrate=False), **common)

    _assert_softened_to_dev_accuracy(sure_teacher, train, dev, soft.soft_label_temperature)
    assert raw.soft_label_temperature == 1.0
    assert np.abs(seen[1]).max() > 5  # the raw run's targets: the teacher's own steep logits
    np.testing.assert_allclose(seen[0], seen[1] / soft.soft_label_temperature, rtol=1e-5, atol=1e-6)
    report = json.loads((tmp_path / "soft" / "report.json").read_text())
    assert report["soft_label_temperature"] == pytest.approx(soft.soft_label_temperature)


def test_the_cli_turns_it_off_and_a_config_must_give_a_boolean(sure_teacher, toy_data, tmp_path):
    train, dev = toy_data
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    args = ["distill", "--teacher", str(sure_teacher), "--train", str(train), "--dev", str(dev)]
    args += ["--student", str(config), "--epochs", "1", "--json", "--quiet"]
    result = CliRunner().invoke(main, args + ["--no-calibrate", "--out", str(tmp_path / "off")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["soft_label_temperature"] == 1.0
    result = CliRunner().invoke(main, args + ["--out", str(tmp_path / "on")])
    assert result.exit_code == 0, result.output
    _assert_softened_to_dev_accuracy(sure_teacher, train, dev, json.loads(result.stdout)["soft_label_temperature"])

    from mlx_edge.errors import ConfigError
    from mlx_edge.settings import DistillSettings

    with pytest.raises(ConfigError, match="calibrate = 'yes' in \\[distill\\] is not true or false"):
        DistillSettings.from_section({"calibrate": "yes"}, "[distill]")


def test_the_static_student_learns_softened_logits_too(sure_teacher, toy_data, tmp_path):
    train, dev = toy_data
    args = ["distill", "--teacher", str(sure_teacher), "--train", str(train), "--dev", str(dev)]
    args += ["--student", "static", "--static-dim", "16", "--epochs", "1", "--min-steps", "0", "--json", "--quiet"]
    soft = CliRunner().invoke(main, args + ["--out", str(tmp_path / "on")])
    raw = CliRunner().invoke(main, args + ["--no-calibrate", "--out", str(tmp_path / "off")])
    assert soft.exit_code == 0 and raw.exit_code == 0, soft.output + raw.output
    _assert_softened_to_dev_accuracy(sure_teacher, train, dev, json.loads(soft.stdout)["soft_label_temperature"])
    assert json.loads(raw.stdout)["soft_label_temperature"] == 1.0
