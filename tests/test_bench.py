"""`mlx-edge bench` on a micro model (2 layers, width 32): the JSON's shape and values, the plot,
skipped and faked devices, and a deliberately wrong backend that must be flagged, not ranked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.errors import BENCH_DISAGREEMENT, BenchError

MICRO = [
    "--infer-batches",
    "1,2",
    "--seq-lens",
    "16",
    "--train-batch",
    "2",
    "--train-seq",
    "16",
    "--warmup",
    "1",
    "--repeats",
    "2",
    "--min-s",
    "0",
    "--budget-s",
    "1",
    "--matmul-n",
    "256",
    "--quiet",
]
CPU_BACKENDS = ("mlx-cpu", "torch-cpu", "onnxruntime-cpu")
# The peak matmul and a workload are timed separately on a shared machine: allow the achieved
# FLOP/s to exceed the measured peak by this factor before calling it wrong.
ROOFLINE_SLACK = 5


def micro_kwargs(tiny_bert_dir, **extra):
    base = dict(
        model=str(tiny_bert_dir),
        teacher=tiny_bert_dir,
        seq_lens=(16,),
        infer_batches=(1, 2),
        train_batch=2,
        train_seq=16,
        warmup=1,
        repeats=2,
        min_s=0.0,
        budget_s=1.0,
        matmul_n=256,
    )
    return {**base, **extra}


@pytest.fixture(scope="module")
def cli_run(tiny_bert_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "--model",
            str(tiny_bert_dir),
            "--teacher",
            str(tiny_bert_dir),
            "--workloads",
            "infer,train,teacher-train,distill,distill-live,label",
            "--json",
            str(out / "bench.json"),
            "--plot",
            str(out / "bench.png"),
            *MICRO,
        ],
    )
    return result, out


def test_json_structure_and_values(cli_run):
    result, out = cli_run
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    assert report["schema_version"] == 1
    assert {"platform", "cpus", "python", "load_average"} <= set(report["machine"])
    assert set(CPU_BACKENDS) <= set(report["backends"])
    for name in CPU_BACKENDS:
        assert report["peak_matmul"][name]["flops_per_s"] > 0
    assert report["model"]["student"]["layers"] == 2 and report["model"]["student"]["hidden"] == 32
    names = [w["name"] for w in report["workloads"]]
    assert names == [
        "infer b1 L16",
        "infer b2 L16",
        "train b2 L16",
        "teacher-train b2 L16",
        "distill b2 L16",
        "distill-live b2 L16",
        "label b2 L16",
    ]
    assert report["disagreements"] == []
    for row in report["workloads"]:
        assert row["flops"] > 0
        ranked = [e for e in row["results"] if e["status"] == "ok"]
        assert row["fastest"] == min(ranked, key=lambda e: e["median_s"])["backend"]
        for e in ranked:
            assert e["samples_per_s"] > 0 and e["median_s"] > 0 and e["min_s"] <= e["median_s"] <= e["max_s"]
            assert 1 <= e["repeats"] <= 2 and e["spread"] >= 0
            assert e["ratio"] >= 1.0 and (e["ratio"] == 1.0) == (e["backend"] == row["fastest"])
            assert 0 < e["roofline_pct"] <= 100 * ROOFLINE_SLACK
            assert e["memory"]["rss_delta_bytes"] >= 0
            assert e["agreement"]["agrees"]
        mlx = next(e for e in ranked if e["backend"] == "mlx-cpu")
        assert mlx["memory"]["device_peak_bytes"] > 0 and "MLX" in mlx["memory"]["device_peak_kind"]
        ort = next(e for e in row["results"] if e["backend"] == "onnxruntime-cpu")
        if row["kind"] in ("train", "teacher-train", "distill", "distill-live"):
            assert ort["status"] == "unsupported" and "inference only" in ort["reason"]
            assert {e["backend"] for e in ranked} == {"mlx-cpu", "torch-cpu"}
        else:
            assert set(CPU_BACKENDS) <= {e["backend"] for e in ranked}


def test_mlx_rows_name_the_product_path_they_ran(cli_run):
    """No bench-only MLX code: training rows run distill's TrainStep, batches the label/predict
    BatchForward, batch 1 the compiled single-sentence path; each row says so, with its settings."""
    result, out = cli_run
    report = json.loads((out / "bench.json").read_text())
    paths = {
        row["name"]: next(e for e in row["results"] if e["backend"] == "mlx-cpu")["path"] for row in report["workloads"]
    }
    for name in ("train b2 L16", "teacher-train b2 L16", "distill b2 L16", "distill-live b2 L16"):
        assert paths[name].startswith("distill TrainStep") and "compiled" in paths[name]
    assert "CPU stream" in paths["infer b2 L16"] and "eager" in paths["infer b2 L16"]
    assert "CPU stream" in paths["label b2 L16"]
    assert paths["infer b1 L16"].startswith("1 CPU stream") and "compiled" in paths["infer b1 L16"]
    assert "paths (the code the product runs" in result.output


def test_table_lists_ratios_and_skipped(cli_run):
    result, _ = cli_run
    text = result.output
    assert "fastest" in text and "% peak" in text and "RSS+" in text
    assert any(line.strip().endswith("MB") or "MB" in line for line in text.splitlines() if "train b2" in line)


def test_table_names_the_fastest_backend_per_workload_and_its_command(cli_run):
    result, out = cli_run
    report = json.loads((out / "bench.json").read_text())
    section = result.output.split("which backend (")[1].split("\n\n")[0].splitlines()[1:]
    assert len(section) == len(report["workloads"])
    commands = {
        "mlx": {"infer": "predict --backend mlx", "train": "distill", "teacher-train": "teacher train --backend mlx"},
        "onnxruntime": {"infer": "predict --backend onnx"},
        "torch": {"teacher-train": "teacher train --backend torch", "label": "teacher label --backend torch"},
    }
    for row, line in zip(report["workloads"], section):
        name, rest = line[:24].strip(), line[24:].split(maxsplit=1)
        assert name == row["name"] and rest[0] == row["fastest"]
        family = row["fastest"].split("-")[0]
        expected = commands.get(family, {}).get(row["kind"])
        if expected:
            assert rest[1] == f"mlx-edge {expected}"
        elif (row["kind"], family) not in (("distill", "mlx"), ("distill-live", "mlx"), ("label", "mlx")):
            assert rest[1] == f"no mlx-edge command runs this on {family}"


@pytest.mark.skipif(sys.platform == "darwin", reason="on a Mac, Metal, MPS and CoreML are present")
def test_absent_backends_skipped_with_reason(cli_run):
    result, out = cli_run
    report = json.loads((out / "bench.json").read_text())
    skipped = {s["backend"]: s["reason"] for s in report["skipped"]}
    assert "Metal" in skipped["mlx-metal"] and "CUDA" in skipped["mlx-cuda"]
    assert "MPS" in skipped["torch-mps"]
    assert "macOS" in skipped["coreml-cpu"] and "macOS" in skipped["coreml-ane"]
    for name in skipped:
        assert f"skipped {name}:" in result.output
    import torch

    if not torch.cuda.is_available():
        assert "CUDA" in skipped["torch-cuda"]


def test_plot_is_a_png(cli_run):
    PIL = pytest.importorskip("PIL.Image")
    _, out = cli_run
    with PIL.open(out / "bench.png") as image:
        assert image.format == "PNG"
        width, height = image.size
    assert width >= 600 and height == 450  # figsize (>= 6, 4.5) inches at 100 dpi


def test_wrong_backend_is_flagged_not_ranked(tiny_bert_dir, monkeypatch, tmp_path):
    """Fault injected: torch-cpu's student gets a shifted classifier bias after loading."""
    from mlx_edge.bench import torch_runner

    real_load = torch_runner.TorchRunner._load

    def corrupt(self, which):
        model = real_load(self, which)
        if which == "student":
            with __import__("torch").no_grad():
                model.classifier.bias += 0.5
        return model

    monkeypatch.setattr(torch_runner.TorchRunner, "_load", corrupt)
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "--model",
            str(tiny_bert_dir),
            "--teacher",
            str(tiny_bert_dir),
            "--backends",
            ",".join(CPU_BACKENDS),
            "--workloads",
            "infer,label",
            "--json",
            str(tmp_path / "b.json"),
            *MICRO,
        ],
    )
    assert result.exit_code == BENCH_DISAGREEMENT, result.output
    assert "DISAGREES" in result.output and "WARNING: torch-cpu disagrees" in result.output
    report = json.loads((tmp_path / "b.json").read_text())
    flagged = {(d["workload"], d["backend"], d["reference"]) for d in report["disagreements"]}
    assert flagged == {("infer b1 L16", "torch-cpu", "mlx-cpu"), ("infer b2 L16", "torch-cpu", "mlx-cpu")}
    for row in report["workloads"]:
        torch_entry = next(e for e in row["results"] if e["backend"] == "torch-cpu")
        if row["kind"] == "infer":
            assert torch_entry["status"] == "disagrees" and "ratio" not in torch_entry
            assert row["fastest"] in ("mlx-cpu", "onnxruntime-cpu")
            assert torch_entry["agreement"]["max_abs_diff"] == pytest.approx(0.5, abs=0.05)
        else:  # the teacher was not touched: label agrees
            assert torch_entry["status"] == "ok"


def test_fake_cuda_and_mps_run_the_gpu_code_paths(tiny_bert_dir, monkeypatch):
    """Faked: PyTorch reports CUDA and MPS present, their torch.device is the CPU, and the
    synchronize / memory functions are counters. Not faked: everything else in the runner, so the
    GPU backends' build, check, timing, sync and memory reporting run for real."""
    import torch

    from mlx_edge.bench import bench, torch_runner
    from mlx_edge.runtime import devices

    calls = {"cuda.sync": 0, "mps.sync": 0, "cuda.reset": 0}
    monkeypatch.setattr(devices, "torch_backends_available", lambda: {"cuda": True, "mps": True, "cpu": True})
    monkeypatch.setattr(torch_runner, "_torch_device", lambda name: torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.__setitem__("cuda.sync", calls["cuda.sync"] + 1))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(
        torch.cuda, "reset_peak_memory_stats", lambda *a: calls.__setitem__("cuda.reset", calls["cuda.reset"] + 1)
    )
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 123_456)
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.__setitem__("mps.sync", calls["mps.sync"] + 1))
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 654_321)
    report = bench(
        **micro_kwargs(tiny_bert_dir, backends=["torch-cuda", "torch-mps", "torch-cpu"], workloads=("infer", "train"))
    )
    assert not report["skipped"]
    assert report["peak_matmul"]["torch-cuda"]["n"] == 256
    for row in report["workloads"]:
        by_name = {e["backend"]: e for e in row["results"]}
        assert all(e["status"] == "ok" for e in by_name.values())
        assert by_name["torch-cuda"]["memory"]["device_peak_bytes"] == 123_456
        assert by_name["torch-mps"]["memory"]["device_peak_bytes"] == 654_321
        assert "not a peak" in by_name["torch-mps"]["memory"]["device_peak_kind"]
        assert by_name["torch-cpu"]["memory"]["device_peak_bytes"] is None
    steps = sum(e["repeats"] for row in report["workloads"] for e in row["results"] if e["backend"] == "torch-cuda")
    assert calls["cuda.sync"] >= steps and calls["mps.sync"] >= steps
    assert calls["cuda.reset"] == len(report["workloads"])


def test_fake_mlx_gpu_runs_the_gpu_backend(tiny_bert_dir, monkeypatch):
    """Faked: MLX reports a Metal GPU, and the backend's device is mx.cpu (there is no GPU here)."""
    import mlx.core as mx

    from mlx_edge.bench import bench, mlx_runner
    from mlx_edge.runtime import devices

    monkeypatch.setattr(devices, "mlx_gpu_kind", lambda: "metal")
    monkeypatch.setattr(mlx_runner, "_mlx_device", lambda name: mx.cpu)
    report = bench(**micro_kwargs(tiny_bert_dir, backends=["mlx"], workloads=("infer", "distill")))
    assert [s["backend"] for s in report["skipped"]] == ["mlx-cuda"]
    assert "CUDA" in report["skipped"][0]["reason"]
    for row in report["workloads"]:
        assert {e["backend"]: e["status"] for e in row["results"]} == {"mlx-metal": "ok", "mlx-cpu": "ok"}


def test_fake_coreml_runs_the_converted_program(tiny_bert_dir, monkeypatch):
    """Faked: the macOS check, and MLModel.predict, which CoreML offers only on macOS; the fake runs
    the saved mlprogram with the NumPy MIL interpreter instead. The conversion is the real one."""
    from bridges.mil_numpy import load_program, run_program
    from mlx_edge.bench import backends, bench, ort_runner

    class NumpyMLModel:
        def __init__(self, path, compute_units):
            self.program, self.compute_units = load_program(path), compute_units

        def predict(self, feeds):
            return run_program(self.program, feeds)

    monkeypatch.setattr(backends, "coreml_can_predict", lambda: True)
    monkeypatch.setattr(ort_runner, "_load_mlmodel", NumpyMLModel)
    report = bench(
        **micro_kwargs(tiny_bert_dir, backends=["coreml-cpu", "coreml-ane", "mlx-cpu"], workloads=("infer", "train"))
    )
    assert not report["skipped"] and report["disagreements"] == []
    status = {(row["name"], e["backend"]): e["status"] for row in report["workloads"] for e in row["results"]}
    assert status[("infer b1 L16", "coreml-cpu")] == status[("infer b1 L16", "coreml-ane")] == "ok"
    assert status[("infer b2 L16", "coreml-cpu")] == status[("train b2 L16", "coreml-ane")] == "unsupported"
    assert report["peak_matmul"]["coreml-cpu"] is None  # no roofline for CoreML


def test_peak_matmul_is_sized_for_the_device():
    from mlx_edge.bench.backends import BACKENDS
    from mlx_edge.bench.run import matmul_size

    sizes = {b.name: matmul_size(b) for b in BACKENDS}
    assert sizes["mlx-cpu"] == sizes["torch-cpu"] == 1024
    assert sizes["mlx-metal"] == sizes["torch-cuda"] == sizes["torch-mps"] == 4096
    assert matmul_size(BACKENDS[0], 256) == 256


def test_compare_picks_the_majority():
    from mlx_edge.bench.measure import compare

    good = {"logits": np.array([0.1, 0.2])}
    verdicts = compare({"a": good, "b": {"logits": np.array([0.9, 0.2])}, "c": dict(good)})
    assert verdicts["a"]["agrees"] and verdicts["c"]["agrees"]
    assert not verdicts["b"]["agrees"] and verdicts["b"]["reference"] == "a"
    assert verdicts["b"]["max_abs_diff"] == pytest.approx(0.8)
    two = compare({"a": good, "b": {"logits": np.array([np.nan, 0.2])}})
    assert not two["a"]["agrees"] and not two["b"]["agrees"]  # no two agree: nobody is trusted


def test_flops_count_matches_a_hand_count():
    from mlx_edge.bench.workloads import Workload, forward_flops, workload_flops
    from mlx_edge.models.bert import BertConfig

    c = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, id2label={0: "a", 1: "b"}
    )
    # per layer: q,k,v,o 4*32*32 + ffn 2*32*48 MACs per token; attention 2*L*32 MACs per token
    per_token = 4 * 32 * 32 + 2 * 32 * 48 + 2 * 16 * 32
    expected = 2 * (2 * 3 * 16 * per_token + 3 * (32 * 32 + 32 * 2))
    assert forward_flops(c, 3, 16) == expected
    assert workload_flops(Workload("train", 3, 16), c, c) == 3 * expected
    assert workload_flops(Workload("distill", 3, 16), c, c) == 3 * expected  # the teacher's logits are cached
    assert workload_flops(Workload("distill-live", 3, 16), c, c) == 4 * expected
    small = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48)
    assert workload_flops(Workload("teacher-train", 3, 16), small, c) == 3 * expected  # the teacher's step
    # inference: the last layer's K and V cover every token, its Q, output, FFN and attention [CLS] alone
    last = 3 * 16 * 2 * 32 * 32 + 3 * (2 * 32 * 32 + 2 * 32 * 48 + 2 * 16 * 32)
    cls_only = 2 * (3 * 16 * per_token + last + 3 * (32 * 32 + 32 * 2))
    assert forward_flops(c, 3, 16, logits_only=True) == cls_only
    assert workload_flops(Workload("infer", 3, 16), c, c) == cls_only
    mean = BertConfig(**{**vars(c), "classifier_pooling": "mean"})  # a mean-pooled head reads every row
    assert workload_flops(Workload("infer", 3, 16), mean, c) == expected


def test_the_default_teacher_pools_like_the_built_in_teachers(tmp_path):
    """The random default teacher's head reads the mean of every row, as e5's and MiniLM's do, so the
    `label` row computes the whole last layer as real labeling does (FLOPs counted in full); the
    student pools [CLS], and its inference rows count the [CLS]-only last layer."""
    from mlx_edge.bench.workloads import Workload, forward_flops, prepare_models, workload_flops

    models = prepare_models("tiny", tmp_path, seed=0)
    assert models.teacher.classifier_pooling == "mean" and models.student.classifier_pooling == "cls"
    label = Workload("label", 2, 16)
    assert workload_flops(label, models.student, models.teacher) == forward_flops(models.teacher, 2, 16)
    infer = Workload("infer", 2, 16)
    assert workload_flops(infer, models.student, models.teacher) < forward_flops(models.student, 2, 16)


def test_default_workloads_are_the_products_paths():
    """The default distill row reads the teacher's logits as a targets cache holds them (what `mlx-edge run`
    distills from); the live teacher and the old name stay reachable; the CLI lists every kind."""
    from mlx_edge.bench.workloads import ALIASES, DEFAULT_KINDS, KINDS, plan
    from mlx_edge.cli.bench import WORKLOAD_KINDS

    assert WORKLOAD_KINDS == (*KINDS, *ALIASES)
    assert "distill-live" not in DEFAULT_KINDS and {"distill", "teacher-train"} <= set(DEFAULT_KINDS)
    assert [w.kind for w in plan(("distill-cached",))] == ["distill"]
    assert CliRunner().invoke(main, ["bench", "--help"]).output.count("teacher-train") >= 1


def test_bad_arguments_are_one_line_errors(tmp_path):
    result = CliRunner().invoke(main, ["bench", "--backends", "tpu"])
    assert result.exit_code == 2 and "unknown tpu" in result.output
    result = CliRunner().invoke(main, ["bench", "--model", str(tmp_path / "nope"), "--quiet"])
    assert result.exit_code == BenchError.exit_code and "neither a preset nor a directory" in result.output
    assert "Traceback" not in result.output


def test_bench_help_imports_no_heavy_library():
    code = (
        "import sys; from mlx_edge.cli import main\n"
        "try: main(['bench', '--help'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in ('mlx.core','torch','onnxruntime','matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "--backends" in out and out.strip().splitlines()[-1] == "[]"


def test_short_steps_repeat_until_the_floor_and_the_budget_stops_them():
    from mlx_edge.bench.measure import time_steps

    def step():
        time.sleep(0.002)

    assert len(time_steps(step, warmup=0, repeats=2, budget_s=5.0)) == 2  # no floor: exactly `repeats`
    floored = time_steps(step, warmup=0, repeats=2, budget_s=5.0, min_s=0.1)
    assert len(floored) >= 10 and sum(floored) >= 0.09
    capped = time_steps(step, warmup=0, repeats=2, budget_s=0.05, min_s=10.0)
    assert 2 <= len(capped) and sum(capped) < 1.0  # the budget wins over the floor


def test_training_rows_time_the_models_dropout_and_check_without_it(tiny_bert_dir, tmp_path):
    """The bench keeps the model's own dropout (BERT's and the presets' 0.1) for the timed steps; the
    check that backends are compared on runs with dropout off, so it is deterministic."""
    from mlx_edge.bench.backends import select
    from mlx_edge.bench.mlx_runner import MlxRunner
    from mlx_edge.bench.torch_runner import TorchRunner
    from mlx_edge.bench.workloads import Workload, make_inputs, prepare_models

    models = prepare_models(str(tiny_bert_dir), tmp_path, teacher=tiny_bert_dir)
    assert models.student.hidden_dropout_prob == 0.1 and models.teacher.attention_probs_dropout_prob == 0.1
    workload = Workload("train", 2, 16)
    inputs = make_inputs(workload, models.student.vocab_size, models.student.num_labels)
    specs = {s.name: s for s in select(["mlx-cpu", "torch-cpu"])}
    for runner in (MlxRunner(specs["mlx-cpu"], models), TorchRunner(specs["torch-cpu"], models, threads=1)):
        task = runner.build(workload, inputs)
        first, second = task.check(), task.check()
        np.testing.assert_array_equal(first["loss"], second["loss"])
        task.step()  # updates the weights: the next check sees them
        assert not np.array_equal(task.check()["loss"], first["loss"])


def test_the_pipeline_row_times_the_demos_stages(tiny_bert_dir, tmp_path):
    out = tmp_path / "bench.json"
    command = ["bench", "--backends", "mlx", "--workloads", "pipeline", "--pipeline-limit", "40"]
    command += ["--pipeline-bundles", "fp16", "--teacher", str(tiny_bert_dir), "--json", str(out), "--quiet"]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0, result.output
    pipeline = json.loads(out.read_text())["pipeline"]
    names = [s["name"] for s in pipeline["stages"]]
    assert names == ["teacher", "label", "distill", "export", "check", "report"]
    assert all(s["minutes"] > 0 and s["status"] == "ran" for s in pipeline["stages"])
    assert sum(s["minutes"] for s in pipeline["stages"]) <= pipeline["total_minutes"]
    assert pipeline["limit"] == 40 and pipeline["bundles"] == ["fp16"] and pipeline["check_ok"] is not None
    assert "pipeline: the demo's stages on the shipped to-do data (40 rows per split)" in result.output
    assert re.search(r"\n  distill +\d+\.\d min  ran\n", result.output)
