"""The static-embedding student (`distill --student static`): its table's model2vec-style start, the
CLI end to end (distill, predict, export, check), numeric parity MLX ⇄ PyTorch mirror ⇄ the converted
mlprogram run in NumPy against a hand-written reference, the manifest contract, and the options it
refuses. All on the tiny teacher of tests/conftest.py (a few seconds each)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner

from bridges.mil_numpy import OPS, load_program, run_program
from bridges.static_mirror import StaticMirror
from bridges.torch_mirror import load_mirror, read_student_weights, run_mirror
from mlx_edge.bundle.layout import manifest_problems
from mlx_edge.cli import main
from mlx_edge.distill.static_settings import STATIC
from mlx_edge.distill.static_table import initial_table, pca, sif_weights, with_context
from mlx_edge.export import export_bundle
from mlx_edge.models.checkpoint import load_config, load_model
from mlx_edge.models.static import StaticModel
from tests.helpers.cli import assert_one_line_error
from tests.helpers.static import build_tiny_static

# fp32 everywhere: MLX vs the mirror vs the program vs NumPy differ only by summation order
FP32_TOL = 1e-5


def _distill_args(teacher: Path, train: Path, dev: Path, out: Path, *extra: str) -> list[str]:
    return [
        "distill", "--teacher", str(teacher), "--train", str(train), "--dev", str(dev),
        "--student", "static", "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def static_student(trained_teacher, toy_data, tmp_path_factory) -> tuple[Path, dict]:
    """A static student distilled through the CLI (live teacher, width 8, 6 epochs) and its JSON report."""
    out = tmp_path_factory.mktemp("static") / "s"
    train, dev = toy_data
    args = _distill_args(trained_teacher, train, dev, out, "--static-dim", "8", "--epochs", "6", "--json")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_distill_writes_a_static_student_that_learned_the_toy_task(static_student):
    out, report = static_student
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "static" and config["hidden_size"] == 8
    manifest = json.loads((out / "mlx_edge_manifest.json").read_text())
    assert manifest["student"] == "static" and manifest["static"] == {
        "dim": 8,
        "freeze_table": False,
        "table_from": "alone",
    }
    assert manifest["vocab"]["mode"] == "seen+script" and manifest["vocab"]["kept"] == config["vocab_size"]
    # the static defaults apply where the command line gave nothing; what it gave wins
    assert manifest["loop"]["learning_rate"] == STATIC.learning_rate and manifest["loop"]["epochs"] == 6
    assert manifest["vocab"]["extra"] == STATIC.vocab_extra
    assert (out / "tokenizer.json").is_file() and (out / "vocab.txt").is_file()
    # the toy set is separable by its words: a table of them, mean-pooled, learns it
    assert report["student_dev_accuracy"] >= 0.9 and report["agreement"] >= 0.9
    assert report["student_parameters"] == config["vocab_size"] * 8 + 2 * 8 + 2  # table + head (2 labels)
    model = load_model(out, require_head=True)
    assert isinstance(model, StaticModel) and model.config.labels == ["finance", "health"]


def test_predict_reads_a_static_student(static_student, tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path))  # the ONNX program is exported into it
    out, _ = static_student
    rows = {}
    for backend in ("mlx", "onnx"):
        command = ["predict", str(out), "pay the credit card bill", "--json", "--backend", backend]
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 0, result.output
        rows[backend] = json.loads(result.stdout.splitlines()[0])
    assert max(rows["mlx"]["probabilities"], key=rows["mlx"]["probabilities"].get) == "finance"
    mlx, onnx = (np.array(list(rows[b]["probabilities"].values())) for b in ("mlx", "onnx"))
    np.testing.assert_allclose(onnx, mlx, atol=1e-5)  # the static program ONNX Runtime runs answers the same


def test_export_then_check_passes(static_student, tmp_path):
    out, _ = static_student
    bundle = tmp_path / "bundle"
    result = CliRunner().invoke(main, ["export", str(out), "--out", str(bundle), "--n-texts", "8", "--quiet"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["student"]["kind"] == "static" and manifest["student"]["num_hidden_layers"] == 0
    assert manifest["models"]["encoder"]["embedding_output"] == "embedding"
    assert manifest["models"]["head"]["inputs"][0]["shape"] == [8]  # the head takes the table's width
    assert sorted(manifest["models"]) == ["encoder", "head"]
    result = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "8", "--json"])
    assert result.exit_code == 0, result.output
    checks = {r["name"]: r for r in json.loads(result.stdout)["results"]}
    for name in ("weights.encoder", "parity.mirror_vs_mlx", "parity.encoder.program", "tokenizer.vocabulary"):
        assert checks[name]["ok"] and not checks[name]["skipped"], checks[name]


def _reference(table: np.ndarray, w: np.ndarray, b: np.ndarray, ids: np.ndarray, mask: np.ndarray):
    """The static student written out by hand in float64: mean of the unmasked rows, then the head."""
    rows = table[ids].astype(np.float64)
    m = mask[..., None].astype(np.float64)
    pooled = (rows * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
    return pooled, pooled @ w.T.astype(np.float64) + b


def test_mlx_mirror_and_program_equal_a_hand_written_reference(tmp_path):
    student = build_tiny_static(tmp_path / "student", seed=5, width=12)
    bundle = export_bundle(
        student_dir=student, out_dir=tmp_path / "bundle", seq_len="4-16", precision="fp32", n_texts=4, progress=False
    ).bundle
    weights = read_student_weights(student)
    config = load_config(student)
    mirror = load_mirror(weights, config, source=student)
    assert isinstance(mirror, StaticMirror)
    program = load_program(bundle / "Encoder.mlpackage")
    model = load_model(student)
    rng = np.random.default_rng(0)
    for length in (4, 9, 16):  # the flexible lengths the range admits
        ids = rng.integers(0, config.vocab_size, (1, length)).astype(np.int32)
        mask = np.ones((1, length), np.int32)
        mask[0, rng.integers(1, length) :] = 0  # padding after a random number of real tokens
        pooled, logits = _reference(
            weights["table.weight"], weights["classifier.weight"], weights["classifier.bias"], ids, mask
        )
        out = model(mx.array(ids), mx.array(mask))
        got = {
            "mlx": (np.array(out.pooled), np.array(out.logits)),
            "mirror": run_mirror(mirror, ids, mask),
            "program": tuple(
                run_program(program, {"input_ids": ids, "attention_mask": mask})[k] for k in ("embedding", "logits")
            ),
        }
        for name, (emb, lg) in got.items():
            assert np.max(np.abs(emb - pooled)) <= FP32_TOL, name
            assert np.max(np.abs(lg - logits)) <= FP32_TOL, name
    # all padding: zeros, not 0/0
    empty = run_program(
        program, {"input_ids": np.zeros((1, 4), np.int32), "attention_mask": np.zeros((1, 4), np.int32)}
    )
    assert np.all(empty["embedding"] == 0) and np.allclose(empty["logits"], weights["classifier.bias"], atol=FP32_TOL)


def test_clip_op_of_the_interpreter():
    got = OPS["clip"](x=np.array([-2.0, 0.5, 3.0], np.float32), alpha=np.float32(0.0), beta=np.float32(1.0))
    assert got.tolist() == [0.0, 0.5, 1.0]


def test_the_first_table_is_the_states_reduced_and_weighted():
    rng = np.random.default_rng(1)
    alone, sums = rng.normal(size=(5, 6)), rng.normal(size=(5, 6))
    counts = np.array([2.0, 0.0, 1.0, 0.0, 4.0])
    states = with_context(alone, sums, counts)
    assert np.allclose(states, [sums[0] / 2, alone[1], sums[2], alone[3], sums[4] / 4])
    weights = np.array([1.0, 0.5, 0.25, 1.0, 2.0])
    table = initial_table(states, weights, dim=3)
    assert table.shape == (5, 3) and table.dtype == np.float32
    # PCA with every component keeps the centered states' Gram matrix; the top 3 are its best rank-3 part
    centered = states - states.mean(axis=0)
    full = pca(states, 6)
    assert np.allclose(full @ full.T, centered @ centered.T, atol=1e-9)
    top = table / weights[:, None]
    u, s, vt = np.linalg.svd(centered, full_matrices=False)
    assert np.allclose(top @ top.T, (u[:, :3] * s[:3]) @ (u[:, :3] * s[:3]).T, atol=1e-4)


def test_sif_weights_follow_unigram_scores_or_wordpiece_rank():
    unigram = {"model": {"type": "Unigram", "vocab": [["<s>", 0.0], ["▁the", np.log(0.05)], ["▁zebra", np.log(1e-6)]]}}
    w = sif_weights(unigram, np.array([1, 2]), a=1e-3)
    assert np.allclose(w, [1e-3 / (1e-3 + 0.05), 1e-3 / (1e-3 + 1e-6)])
    wordpiece = {"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "a": 1, "b": 2, "c": 3}}}
    w = sif_weights(wordpiece, np.array([0, 3]), a=1e-3)
    harmonic = sum(1 / r for r in (1, 2, 3, 4))
    assert np.allclose(w, [1e-3 / (1e-3 + 1 / harmonic), 1e-3 / (1e-3 + 0.25 / harmonic)])


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--hidden-weight", "1"], "--hidden-weight does not apply to a static student"),
        (["--init", "teacher"], "--init does not apply to a static student"),
        (["--attention-weight", "0.5"], "--attention-weight does not apply"),
        (["--layer-map", "0:1"], "--layer-map does not apply"),
        (["--init-layers", "1"], "--init-layers does not apply to a static student: it has no layers to copy"),
        (["--step-budget", "100"], "--step-budget does not apply to a static student: a token table learns slower"),
    ],
)
def test_options_that_mean_nothing_to_a_table_are_refused(trained_teacher, toy_data, tmp_path, extra, fragment):
    out = tmp_path / "s"
    result = CliRunner().invoke(main, _distill_args(trained_teacher, *toy_data, out, *extra))
    assert_one_line_error(result, fragment)
    assert result.exit_code == 8 and not out.exists()


def test_manifest_schema_takes_a_static_student_and_keeps_bert_ones_layered():
    fixture = Path(__file__).parents[1] / "swift/Tests/MLXEdgeKitTests/Fixtures/bundle/manifest.json"
    bert = json.loads(fixture.read_text(encoding="utf-8"))
    static = copy.deepcopy(bert)
    static["student"].update(kind="static", num_hidden_layers=0)
    assert manifest_problems(static) == []
    no_layers = copy.deepcopy(bert)
    no_layers["student"]["num_hidden_layers"] = 0
    assert manifest_problems(no_layers) == ["student/num_hidden_layers: 0 is less than the minimum of 1"]
    no_layers["student"]["kind"] = "bert"
    assert manifest_problems(no_layers) == ["student/num_hidden_layers: 0 is less than the minimum of 1"]
    static["student"]["kind"] = "lstm"
    assert any("'lstm' is not one of ['bert', 'static']" in p for p in manifest_problems(static))


def test_contextual_states_from_the_cache_equal_the_live_teachers(trained_teacher, toy_data, tmp_path):
    """With the teacher's last layer in the targets cache, the contextual table needs no teacher pass."""
    from mlx_edge.data import read_labeled
    from mlx_edge.distill.static import teacher_hidden
    from mlx_edge.distill.static_table import context_states
    from mlx_edge.models.prune import plan_vocab
    from mlx_edge.models.tokenizer import load_tokenizer
    from mlx_edge.targets import TargetsCache
    from mlx_edge.teacher.label import label_targets

    cache_dir = tmp_path / "targets"
    label_targets(
        teacher=trained_teacher, data=[toy_data[0]], out=cache_dir, backend="mlx", hidden_layers=[2], progress=False
    )
    teacher = load_model(trained_teacher, require_head=True)
    assert teacher.config.num_hidden_layers == 2
    texts = read_labeled(toy_data[0]).texts
    tokenizer = load_tokenizer(trained_teacher)
    ids = [np.asarray(x, np.int32) for x in tokenizer.encode_batch(texts, max_length=32)]
    remap = plan_vocab(trained_teacher, texts, "seen").remap
    live = context_states(teacher_hidden(None, teacher, texts, ids, tokenizer.pad_id), remap)
    cached = context_states(teacher_hidden(TargetsCache.open(cache_dir), teacher, texts, ids, tokenizer.pad_id), remap)
    assert np.array_equal(live[1], cached[1]) and live[1].sum() == sum(len(x) for x in ids)
    # the cache stores fp16: each summed state within a few fp16 steps of the scale of the largest
    assert np.max(np.abs(live[0] - cached[0])) <= 1e-2 * np.abs(live[0]).max()


def test_a_static_student_is_neither_continued_nor_a_teacher(static_student, trained_teacher, toy_data, tmp_path):
    out, _ = static_student
    train, dev = toy_data
    args = ["distill", "--train", str(train), "--dev", str(dev), "--out", str(tmp_path / "s"), "--quiet"]
    result = CliRunner().invoke(main, [*args, "--teacher", str(trained_teacher), "--student", str(out)])
    assert_one_line_error(result, "is a static student: it cannot be continued as a transformer")
    result = CliRunner().invoke(main, [*args, "--teacher", str(out), "--student", "tiny"])
    assert_one_line_error(result, "holds a 'static' model, not a BERT-family encoder")


def test_the_static_loop_turns_off_what_a_table_cannot_learn():
    """distill's defaults train hidden states and attention maps; a static student's loop (what
    `distill_static(loop=None)`, `distill --student static` and the ladder use) has neither."""
    from mlx_edge.distill.config import LoopConfig, Schedule
    from mlx_edge.distill.static import _check_loop, static_loop
    from mlx_edge.distill.static_settings import STATIC

    assert LoopConfig().weights["hidden"].ever_on  # the transformer default it starts from
    loop = static_loop()
    _check_loop(loop)  # raises on any layer loss
    assert (loop.learning_rate, loop.epochs, loop.two_stage_epochs) == (STATIC.learning_rate, STATIC.epochs, 0)
    # distill's step budget (a transformer's) is off: a table runs its epochs, whatever the settings say
    assert static_loop(LoopConfig(step_budget=1500)).step_budget == 0
    assert static_loop(LoopConfig(weights={**LoopConfig().weights, "kd": Schedule(2.0)}), epochs=3).epochs == 3
    assert static_loop(LoopConfig(weights={**LoopConfig().weights, "kd": Schedule(2.0)})).weights["kd"].start == 2.0
