"""Distillation: student init modes, cache checks, exact resume, NaN guard, transformers round trip, CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from mlx.utils import tree_flatten
from safetensors.numpy import load_file, save_file
from transformers import BertForSequenceClassification as HFBert

from mlx_edge.cli import main
from mlx_edge.distill.api import distill
from mlx_edge.distill.loop import LoopConfig, Schedule, run_epochs
from mlx_edge.distill.student import default_layer_map, init_student, parse_layer_map, student_config
from mlx_edge.errors import DistillError, MlxEdgeError, MlxEdgeWarning
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.teacher.label import label_targets
from tests.helpers.cli import assert_one_line_error

MICRO = {
    "num_hidden_layers": 2,
    "hidden_size": 24,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "hidden_act": "gelu_new",
}


@pytest.fixture(scope="module")
def micro_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "micro.json"
    path.write_text(json.dumps(MICRO))
    return path


@pytest.fixture(scope="module")
def cache(trained_teacher, toy_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("targets") / "c"
    label_targets(
        teacher=trained_teacher,
        data=[toy_data[0]],
        out=out,
        backend="mlx",
        hidden_layers=[0, 1, 2],
        attention_layers=[1, 2],
        shard_size=64,
        progress=False,
    )
    return out


def quick_loop(**overrides) -> LoopConfig:
    base = dict(epochs=2, batch_size=16, learning_rate=2e-3, checkpoint_every=3, seed=3)
    return LoopConfig(**{**base, **overrides})


def test_layer_maps():
    assert default_layer_map(4, 12) == {0: 2, 1: 5, 2: 8, 3: 11}
    assert default_layer_map(3, 6) == {0: 1, 1: 3, 2: 5}
    assert parse_layer_map("0:2,1:5", 2, 6) == {0: 2, 1: 5}
    with pytest.raises(DistillError, match="out of range"):
        parse_layer_map("0:7", 2, 6)
    with pytest.raises(DistillError, match="not like"):
        parse_layer_map("0-2", 2, 6)


def test_weight_schedules_and_two_stage():
    loop = LoopConfig(
        weights={"kd": Schedule(1.0, 0.0), "ce": Schedule(0.5), "hidden": Schedule(2.0)}, two_stage_epochs=1
    )
    assert loop.weights_at(0, 0.5)["kd"] == 0.0 and loop.weights_at(0, 0.5)["hidden"] == 2.0  # stage 1
    later = loop.weights_at(1, 0.5)
    assert later["kd"] == pytest.approx(0.5) and later["ce"] == 0.5 and later["hidden"] == 0.0  # stage 2
    assert Schedule.parse("1:0.25") == Schedule(1.0, 0.25)
    with pytest.raises(DistillError):
        Schedule.parse("-1")


def test_init_modes(trained_teacher, tmp_path):
    teacher = load_model(trained_teacher)
    half, _ = student_config("half", teacher.config)
    assert half.num_hidden_layers == 1 and half.hidden_size == teacher.config.hidden_size
    a = init_student(half, mode="random", seed=1)
    b = init_student(half, mode="random", seed=1)
    c = init_student(half, mode="random", seed=2)
    wa, wb, wc = (dict(tree_flatten(m.parameters())) for m in (a, b, c))
    name = "bert.encoder.layer.0.attention.self.query.weight"
    assert mx.array_equal(wa[name], wb[name]) and not mx.array_equal(wa[name], wc[name])
    # from teacher layers: layer 0 of the student is the teacher's layer 1 (the default map for 1 of 2)
    s = init_student(half, mode="teacher", teacher=teacher)
    ws, wt = dict(tree_flatten(s.parameters())), dict(tree_flatten(teacher.parameters()))
    assert mx.array_equal(ws[name], wt["bert.encoder.layer.1.attention.self.query.weight"])
    assert mx.array_equal(ws["bert.embeddings.word_embeddings.weight"], wt["bert.embeddings.word_embeddings.weight"])
    s0 = init_student(half, mode="teacher", teacher=teacher, teacher_layers=[0])
    assert mx.array_equal(dict(tree_flatten(s0.parameters()))[name], wt[name])
    # widths must match to copy
    tiny, _ = student_config("tiny", teacher.config)
    with pytest.raises(DistillError, match="widths must match"):
        init_student(tiny, mode="teacher", teacher=teacher)
    # from a student directory
    from mlx_edge.models.checkpoint import save_model

    save_model(s0, tmp_path / "s0", tokenizer_from=trained_teacher)
    config, source = student_config(str(tmp_path / "s0"), teacher.config)
    again = init_student(config, mode="student", source=source)
    assert mx.array_equal(dict(tree_flatten(again.parameters()))[name], wt[name])


def test_distilled_student_loads_in_transformers_with_matching_logits(
    trained_teacher, toy_data, cache, micro_json, tmp_path
):
    report = distill(
        teacher=trained_teacher,
        train=toy_data[0],
        dev=toy_data[1],
        targets=cache,
        student=str(micro_json),
        out=tmp_path / "s",
        loop=quick_loop(),
        progress=False,
    )
    assert report.student_parameters < report.teacher_parameters
    assert report.student_dev_accuracy > 0.7  # the toy set is separable; majority is 0.5
    hf, info = HFBert.from_pretrained(tmp_path / "s", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    hf.eval()
    texts = ["pay the bill", "dentist appointment in the park", "card"]
    tokenizer = load_tokenizer(tmp_path / "s")
    ours = load_model(tmp_path / "s")
    for ids in tokenizer.encode_batch(texts, max_length=32):
        with torch.no_grad():
            ref = hf(input_ids=torch.tensor([ids])).logits.numpy()
        np.testing.assert_allclose(np.array(ours(mx.array([ids])).logits), ref, atol=1e-4)
    manifest = json.loads((tmp_path / "s" / "mlx_edge_manifest.json").read_text())
    assert manifest["kind"] == "student" and manifest["report"]["student_dev_accuracy"] == report.student_dev_accuracy
    assert len((tmp_path / "s" / "metrics.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / ".s.work").exists()


def test_every_loss_on_with_live_teacher_and_projection(trained_teacher, toy_data, tmp_path):
    weights = {k: Schedule(1.0) for k in ("kd", "ce", "hidden", "attention", "embedding")}
    report = distill(
        teacher=trained_teacher,
        train=toy_data[0],
        student="tiny",
        out=tmp_path / "s",
        loop=quick_loop(epochs=1, weights=weights, attention_loss="kl"),
        progress=False,
    )
    assert report.steps > 0 and np.isfinite(report.student_dev_accuracy)


# one stream; each batch split over two CPU streams; gradients accumulated over 2 batches of 8
# (the two sharded runs are slow-tier: the fast tier keeps one resume, and shard math has its own tests)
@pytest.mark.parametrize(
    "cpu_shards, grad_accum",
    [(1, 1), pytest.param(2, 1, marks=pytest.mark.slow), pytest.param(2, 2, marks=pytest.mark.slow)],
)
def test_interrupted_run_resumes_to_identical_weights(
    trained_teacher, toy_data, cache, micro_json, tmp_path, cpu_shards, grad_accum
):
    common = dict(
        teacher=trained_teacher,
        train=toy_data[0],
        dev=toy_data[1],
        targets=cache,
        student=str(micro_json),
        progress=False,
        loop=quick_loop(
            epochs=3,
            weights={"kd": Schedule(1.0), "ce": Schedule(0.1), "hidden": Schedule(1.0)},
            cpu_shards=cpu_shards,
            grad_accum=grad_accum,
            batch_size=16 // grad_accum,
        ),
    )
    whole = distill(out=tmp_path / "whole", **common)
    assert whole.steps == 3 * 15  # 240 texts: 15 batches of 16 (or 15 groups of 2 x 8) an epoch

    def interrupt(step, _terms):
        if step == 20:  # mid-epoch 2, two steps after the checkpoint of step 18
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        distill(out=tmp_path / "cut", on_step=interrupt, **common)
    assert (tmp_path / ".cut.work" / "ckpt").is_dir() and not (tmp_path / "cut").exists()
    report = distill(out=tmp_path / "cut", **common)
    assert report.resumed
    assert (tmp_path / "whole" / "model.safetensors").read_bytes() == (
        tmp_path / "cut" / "model.safetensors"
    ).read_bytes()
    whole = [json.loads(x)["dev_accuracy"] for x in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    cut = [json.loads(x)["dev_accuracy"] for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert whole == cut


def test_cpu_shards_resolve_and_blas_threads_restore():
    from mlx_edge.runtime.blas import _openblas_thread_functions, blas_threads
    from mlx_edge.runtime.cpu_streams import cpu_cores, resolve_shards

    device = mx.default_device()
    mx.set_default_device(mx.cpu)
    try:
        assert resolve_shards(3, 32) == 3 and resolve_shards(8, 4) == 4 and resolve_shards(None, 4) == 1
        assert resolve_shards(None, 32) == min(cpu_cores(), 4)
    finally:
        mx.set_default_device(device)
    functions = _openblas_thread_functions()
    if functions is None:
        pytest.skip("no OpenBLAS in this process (MLX_EDGE_BLAS=bundled or not Linux): nothing to limit")
    get, set_ = functions
    before = get()
    set_(2)
    try:
        with blas_threads(1):
            assert get() == 1
        assert get() == 2
    finally:
        set_(before)


def test_nan_loss_stops_and_names_step_and_term(trained_teacher, toy_data, cache, micro_json, tmp_path):
    poisoned = tmp_path / "poisoned"
    shutil.copytree(cache, poisoned)
    shard = poisoned / "shard-00002.safetensors"
    tensors = load_file(shard)
    tensors["logits"][5] = np.nan
    save_file(tensors, shard)
    with pytest.raises(DistillError, match=r"step \d+: loss went bad \(kd=nan.*last good checkpoint \(step \d+\)"):
        distill(
            teacher=trained_teacher,
            train=toy_data[0],
            dev=toy_data[1],
            targets=poisoned,
            student=str(micro_json),
            out=tmp_path / "s",
            loop=quick_loop(epochs=3, checkpoint_every=1),
            progress=False,
        )
    assert (tmp_path / ".s.work" / "ckpt" / "weights.safetensors").is_file()
    weights = mx.load(str(tmp_path / ".s.work" / "ckpt" / "weights.safetensors"))
    assert all(bool(mx.all(mx.isfinite(v)).item()) for v in weights.values())  # the kept checkpoint is good
    assert not (tmp_path / "s").exists()


def test_cache_mismatches_are_refused(trained_teacher, toy_data, cache, tmp_path):
    args = dict(
        teacher=trained_teacher,
        train=toy_data[0],
        student="tiny",
        out=tmp_path / "s",
        progress=False,
        loop=quick_loop(epochs=1),
    )
    with pytest.raises(MlxEdgeError, match="max length 32, not 16"):
        distill(targets=cache, max_length=16, **args)
    other_tok = tmp_path / "teacher-other-vocab"
    shutil.copytree(trained_teacher, other_tok)
    tokenizer = json.loads((other_tok / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"]["pay"], tokenizer["model"]["vocab"]["bill"] = (
        tokenizer["model"]["vocab"]["bill"],
        tokenizer["model"]["vocab"]["pay"],
    )
    (other_tok / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(MlxEdgeError, match="another tokenizer"):
        distill(targets=cache, **{**args, "teacher": other_tok})
    with pytest.raises(MlxEdgeError, match="lacks teacher layers.*--attention-layers"):
        narrow = tmp_path / "narrow"
        label_targets(teacher=trained_teacher, data=[toy_data[0]], out=narrow, progress=False)
        distill(
            targets=narrow, **{**args, "loop": quick_loop(weights={"kd": Schedule(1.0), "attention": Schedule(1.0)})}
        )
    extra = tmp_path / "more.jsonl"
    extra.write_text(toy_data[0].read_text() + json.dumps({"text": "pay the dentist", "label": "finance"}) + "\n")
    with pytest.raises(MlxEdgeError, match="1 of 241 training texts are not in the targets cache"):
        distill(targets=cache, **{**args, "train": extra, "dev": toy_data[1]})


def test_reading_a_cache_imports_no_torch(trained_teacher, toy_data, cache, micro_json, tmp_path):
    code = f"""
import sys
from pathlib import Path
from mlx_edge.distill.api import distill
from mlx_edge.distill.loop import LoopConfig
distill(teacher=Path({str(trained_teacher)!r}), train=Path({str(toy_data[0])!r}), targets=Path({str(cache)!r}),
        student={str(micro_json)!r}, out=Path({str(tmp_path / "s")!r}), loop=LoopConfig(epochs=1), progress=False)
print("torch" in sys.modules, "transformers" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"]


def test_cli_distill_then_predict(trained_teacher, toy_data, cache, micro_json, tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "distill",
            "--teacher",
            str(trained_teacher),
            "--train",
            str(toy_data[0]),
            "--targets",
            str(cache),
            "--student",
            str(micro_json),
            "--out",
            str(tmp_path / "s"),
            "--epochs",
            "2",
            "--batch-size",
            "16",
            "--learning-rate",
            "2e-3",
            "--cpu-shards",
            "3",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "retained" in result.output and "faster" in result.output
    setup = json.loads((tmp_path / "s" / "mlx_edge_manifest.json").read_text())
    assert '"cpu_shards": 3' in json.dumps(setup)  # the option reached the loop (and its fingerprint)
    result = CliRunner().invoke(main, ["predict", str(tmp_path / "s"), "pay the credit card bill", "--json"])
    row = json.loads(result.stdout.splitlines()[0])
    assert set(row["probabilities"]) == {"finance", "health"}
    again = CliRunner().invoke(
        main,
        [
            "distill",
            "--teacher",
            str(trained_teacher),
            "--train",
            str(toy_data[0]),
            "--student",
            "tiny",
            "--out",
            str(tmp_path / "s"),
        ],
    )
    assert_one_line_error(again, "already exists", "--force")
    bad = CliRunner().invoke(
        main,
        [
            "distill",
            "--teacher",
            str(trained_teacher),
            "--train",
            str(toy_data[0]),
            "--student",
            "huge",
            "--out",
            str(tmp_path / "t"),
        ],
    )
    assert_one_line_error(bad, "unknown student 'huge'", "tiny")


def test_a_new_student_has_a_pruned_vocabulary_that_transformers_reads(
    trained_teacher, toy_data, cache, micro_json, tmp_path
):
    from transformers import AutoTokenizer

    from mlx_edge.data import read_labeled

    common = dict(teacher=trained_teacher, train=toy_data[0], dev=toy_data[1], loop=quick_loop(), progress=False)
    pruned = distill(**common, targets=cache, student=str(micro_json), out=tmp_path / "p", vocab_extra=0)
    full = distill(**common, targets=cache, student=str(micro_json), out=tmp_path / "f", vocab="all")
    distill(**common, targets=cache, student=str(micro_json), out=tmp_path / "d")  # the default: 4000 extra pieces
    default = json.loads((tmp_path / "d" / "mlx_edge_manifest.json").read_text())["vocab"]
    assert default["extra"] == 4000  # what a new student keeps unless told otherwise
    teacher_vocab = load_tokenizer(trained_teacher).vocab_size
    pruned_config = json.loads((tmp_path / "p" / "config.json").read_text())
    assert load_tokenizer(tmp_path / "f").vocab_size == teacher_vocab
    assert pruned_config["vocab_size"] == load_tokenizer(tmp_path / "p").vocab_size < teacher_vocab
    assert pruned.student_parameters < full.student_parameters
    manifest = json.loads((tmp_path / "p" / "mlx_edge_manifest.json").read_text())
    assert manifest["vocab"] == {
        "mode": "seen+script",
        "extra": 0,
        "extra_from_english": 0,
        "kept": pruned_config["vocab_size"],
        "full": teacher_vocab,
    }
    # the pruned tokenizer, as transformers loads it, gives the student's ids for the training texts
    texts = read_labeled(toy_data[0]).texts[:20]
    hf_ids = AutoTokenizer.from_pretrained(tmp_path / "p")(texts, truncation=True, max_length=32)["input_ids"]
    assert hf_ids == load_tokenizer(tmp_path / "p").encode_batch(texts, max_length=32)
    hf = HFBert.from_pretrained(tmp_path / "p").eval()
    ours = load_model(tmp_path / "p")
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([hf_ids[0]])).logits.numpy()
    np.testing.assert_allclose(np.array(ours(mx.array([hf_ids[0]])).logits), ref, atol=1e-4)


def test_pruned_student_with_a_live_teacher_and_init_from_teacher_then_continued(trained_teacher, toy_data, tmp_path):
    weights = {"kd": Schedule(1.0), "ce": Schedule(0.1), "hidden": Schedule(1.0), "attention": Schedule(1.0)}
    first = distill(
        teacher=trained_teacher,
        train=toy_data[0],
        student="half",
        init="teacher",
        out=tmp_path / "s",
        loop=quick_loop(epochs=1, weights=weights),
        progress=False,
    )
    student = load_model(tmp_path / "s")
    teacher = load_model(trained_teacher)
    keep = np.array([load_tokenizer(trained_teacher).token_id(p) for p in _pieces(tmp_path / "s")])
    assert student.config.vocab_size == len(keep) < teacher.config.vocab_size
    config, _ = student_config("half", teacher.config)
    fresh = init_student(
        replace(config, vocab_size=len(keep)), mode="teacher", teacher=teacher, keep=np.array(sorted(keep))
    )
    np.testing.assert_array_equal(  # --init teacher: the kept rows of the teacher's table, in order
        np.array(fresh.bert.embeddings.word_embeddings.weight),
        np.array(teacher.bert.embeddings.word_embeddings.weight)[np.sort(keep)],
    )
    assert first.steps > 0 and np.isfinite(first.student_dev_accuracy)
    # continuing the pruned student keeps its vocabulary (matched to the teacher's by piece)
    again = distill(
        teacher=trained_teacher,
        train=toy_data[0],
        student=str(tmp_path / "s"),
        out=tmp_path / "s2",
        loop=quick_loop(epochs=1, weights=weights),
        progress=False,
    )
    assert again.student_parameters == first.student_parameters
    assert _pieces(tmp_path / "s2") == _pieces(tmp_path / "s")


def _pieces(directory: Path) -> list[str]:
    vocab = json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]
    return [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]


def test_init_embeddings_takes_the_teachers_rows_or_their_principal_components(trained_teacher):
    teacher = load_model(trained_teacher)
    table = np.array(teacher.bert.embeddings.word_embeddings.weight)
    keep = np.arange(0, teacher.config.vocab_size, 3)
    same, _ = student_config("half", teacher.config)
    wide = init_student(replace(same, vocab_size=len(keep)), mode="embeddings", teacher=teacher, keep=keep)
    np.testing.assert_array_equal(np.array(wide.bert.embeddings.word_embeddings.weight), table[keep])
    narrow_config, _ = student_config(str(_micro_path()), teacher.config)
    narrow = init_student(replace(narrow_config, vocab_size=len(keep)), mode="embeddings", teacher=teacher, keep=keep)
    got = np.array(narrow.bert.embeddings.word_embeddings.weight)
    assert got.shape == (len(keep), MICRO["hidden_size"])
    # PCA: the projection keeps the largest-variance directions, so it keeps more of the rows' spread
    # than any other projection to that width, e.g. the first coordinates
    centered = table[keep] - table[keep].mean(axis=0)
    assert np.allclose(got.mean(axis=0), 0, atol=1e-5)
    assert (got**2).sum() > (centered[:, : MICRO["hidden_size"]] ** 2).sum()
    assert np.isclose((got**2).sum(), (np.linalg.svd(centered, compute_uv=False)[: MICRO["hidden_size"]] ** 2).sum())


def _micro_path() -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "micro.json"
    path.write_text(json.dumps(MICRO))
    return path


def test_a_teacher_retrained_in_place_starts_the_interrupted_run_over(trained_teacher, toy_data, micro_json, tmp_path):
    teacher = tmp_path / "teacher"
    shutil.copytree(trained_teacher, teacher)
    common = dict(
        teacher=teacher, train=toy_data[0], dev=toy_data[1], student=str(micro_json), progress=False,
        loop=quick_loop(epochs=2, batch_size=16),
    )  # fmt: skip

    def interrupt(step, _terms):
        if step == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        distill(out=tmp_path / "s", on_step=interrupt, **common)
    assert (tmp_path / ".s.work" / "ckpt").is_dir()
    # "retrain" the teacher in place: same path, other weights
    weights = load_file(teacher / "model.safetensors")
    weights = {k: v * 1.01 if v.dtype.kind == "f" else v for k, v in weights.items()}
    save_file(weights, teacher / "model.safetensors", metadata={"format": "pt"})
    with pytest.warns(MlxEdgeWarning, match="teacher weights changed since the interrupted run"):
        report = distill(out=tmp_path / "s", **common)
    assert not report.resumed and report.steps == 2 * 15
    # same inputs again after an interruption: resumed
    with pytest.raises(KeyboardInterrupt):
        distill(out=tmp_path / "t", on_step=interrupt, **common)
    assert distill(out=tmp_path / "t", **common).resumed


def test_an_interrupted_run_whose_vocabulary_plan_changed_starts_over(
    trained_teacher, toy_data, micro_json, tmp_path, monkeypatch
):
    """The extra pieces follow English reference text (models/prune.py): a run interrupted under another
    plan (another mlx-edge version's) holds a table whose rows are other pieces, so it is not resumed."""
    import mlx_edge.distill.api as api

    common = dict(
        teacher=trained_teacher, train=toy_data[0], dev=toy_data[1], student=str(micro_json), progress=False,
        loop=quick_loop(epochs=2, batch_size=16), vocab_extra=3,
    )  # fmt: skip

    def interrupt(step, _terms):
        if step == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(api, "broad_english", lambda count: ["Email the Q3 deck to Lisa before Friday"] * 3)
    with pytest.raises(KeyboardInterrupt):
        distill(out=tmp_path / "s", on_step=interrupt, **common)
    first = json.loads((tmp_path / ".s.work" / "setup.json").read_text())["inputs"]["student vocabulary"]
    monkeypatch.setattr(api, "broad_english", lambda count: ["Renew the passport for Tokyo"] * 3)
    with pytest.warns(MlxEdgeWarning, match="student vocabulary changed since the interrupted run"):
        report = distill(out=tmp_path / "s", **common)
    assert not report.resumed and report.steps == 2 * 15
    assert json.loads((tmp_path / "s" / "mlx_edge_manifest.json").read_text())["vocab"]["extra_from_english"] == 3
    # the same plan again after an interruption: resumed
    with pytest.raises(KeyboardInterrupt):
        distill(out=tmp_path / "t", on_step=interrupt, **common)
    assert json.loads((tmp_path / ".t.work" / "setup.json").read_text())["inputs"]["student vocabulary"] != first
    assert distill(out=tmp_path / "t", **common).resumed


def test_min_steps_runs_the_epochs_a_few_rows_need(trained_teacher, toy_data, micro_json, tmp_path):
    """240 rows in batches of 16 are 15 steps an epoch: --min-steps 40 runs 3 epochs of --epochs 1;
    --min-steps 0 runs exactly the one."""
    args = ["distill", "--teacher", str(trained_teacher), "--train", str(toy_data[0]), "--dev", str(toy_data[1]),
            "--student", str(micro_json), "--epochs", "1", "--batch-size", "16", "--quiet", "--json"]  # fmt: skip
    runs = {}
    for steps in ("40", "0"):
        result = CliRunner().invoke(main, [*args, "--min-steps", steps, "--out", str(tmp_path / steps)])
        assert result.exit_code == 0, result.output
        lines = (tmp_path / steps / "metrics.jsonl").read_text().splitlines()
        runs[steps] = ([json.loads(line)["epoch"] for line in lines], json.loads(result.stdout))
    assert runs["40"][0] == [1, 2, 3] and runs["40"][1]["epochs_run"] == 3 and runs["40"][1]["steps"] == 45
    assert runs["0"][0] == [1] and runs["0"][1]["steps"] == 15


def test_step_budget_cuts_the_epochs_of_a_large_set(trained_teacher, toy_data, micro_json, tmp_path):
    """240 rows in batches of 16 are 15 steps an epoch, 4 epochs 60 steps: --step-budget 40 runs the
    nearest whole number of epochs, 3 (45 steps); 20 runs 1 (round(1.33)); 0 runs all 4."""
    args = ["distill", "--teacher", str(trained_teacher), "--train", str(toy_data[0]), "--dev", str(toy_data[1]),
            "--student", str(micro_json), "--epochs", "4", "--min-steps", "0", "--batch-size", "16", "--quiet",
            "--json"]  # fmt: skip
    runs = {}
    for budget in ("40", "20", "0"):
        result = CliRunner().invoke(main, [*args, "--step-budget", budget, "--out", str(tmp_path / budget)])
        assert result.exit_code == 0, result.output
        lines = (tmp_path / budget / "metrics.jsonl").read_text().splitlines()
        runs[budget] = ([json.loads(line)["epoch"] for line in lines], json.loads(result.stdout)["steps"])
    assert runs == {"40": ([1, 2, 3], 45), "20": ([1], 15), "0": ([1, 2, 3, 4], 60)}


@pytest.mark.parametrize(
    ("epochs", "min_steps", "budget", "two_stage", "steps_per_epoch", "expected"),
    [
        (10, 300, 1500, 0, 488, 3),  # 300 to-do rows' default transfer set: 1,464 steps
        (10, 300, 1500, 0, 372, 4),  # round(4.03): the nearest whole number
        (10, 300, 1500, 0, 85, 10),  # the demo's 2,700 rows: 850 steps, unchanged
        (10, 300, 1500, 0, 9, 34),  # 270 rows and no transfer set: min_steps' epochs
        (10, 300, 1500, 0, 3210, 1),  # a 100k transfer set: one epoch, never none
        (10, 300, 1500, 4, 3210, 5),  # two-stage epochs keep one for the prediction losses
        (2, 300, 1500, 0, 488, 2),  # never more than asked
        (10, 300, 0, 0, 488, 10),  # 0: no cut
    ],
)
def test_run_epochs_the_floor_and_the_budget(epochs, min_steps, budget, two_stage, steps_per_epoch, expected):
    config = LoopConfig(epochs=epochs, min_steps=min_steps, step_budget=budget, two_stage_epochs=two_stage)
    assert run_epochs(config, steps_per_epoch) == expected
