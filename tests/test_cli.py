"""The CLI's shape: built stages only, fast help, doctor, data summary, predict."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoTokenizer, BertForSequenceClassification

from mlx_edge import __version__
from mlx_edge.cli import main


def test_help_lists_only_built_stages():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = set(main.commands)
    assert {
        "doctor",
        "data",
        "predict",
        "demo",
        "run",
        "teacher",
        "distill",
        "export",
        "check",
        "augment",
        "bench",
    } <= listed
    for name in listed:
        assert f"  {name} " in result.output


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_help_imports_no_heavy_library():
    code = (
        "import sys; from mlx_edge.cli import main\n"
        "try: main(['--help'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in ('mlx.core','torch','transformers','coremltools') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_doctor_json_is_usable_here():
    result = CliRunner().invoke(main, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["usable"] is True
    names = {p["name"] for p in report["packages"]}
    assert {"mlx", "torch", "transformers", "coremltools", "numpy", "onnxruntime", "mlx-lm"} <= names
    assert report["coreml_predict"]["possible"] is (sys.platform == "darwin")
    if sys.platform.startswith("linux"):
        assert report["blas"]["name"] == "OpenBLAS", report["blas"]  # setup installs libopenblas0-pthread
        assert report["blas"]["cpu_matmul_gflops"] > 0  # a figure, not a timed test: the name above is the check
        # setup installs g++ and the pinned nanobind: the C++ kernels must be in use, and doctor says so
        assert report["blas"]["cpu_kernels"] is True, report["blas"]["cpu_kernels_detail"]
        text = CliRunner().invoke(main, ["doctor"]).output
        assert "kernels    softmax/GELU/LayerNorm/dropout/attention on CPU: vectorized (mlx-edge C++)" in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C++ kernels are built on Linux only")
def test_doctor_build_builds_the_kernels_once_and_reports_a_failed_build_in_one_line(tmp_path):
    # setup.sh ends with `doctor --build`: built there, so here it only finds the library
    result = CliRunner().invoke(main, ["doctor", "--build", "--json"])
    assert result.exit_code == 0, result.output
    blas = json.loads(result.stdout)["blas"]
    assert blas["cpu_kernels"] is True and blas["cpu_kernels_library"].endswith(".so"), blas
    # no compiler and nothing built (a fresh cache): the install stays usable, the report says why and what to run
    (tmp_path / "bin").mkdir()
    env = {**os.environ, "MLX_EDGE_CACHE": str(tmp_path / "cache"), "PATH": str(tmp_path / "bin")}
    env.pop("CXX", None)
    code = "import sys; from mlx_edge.cli import main; main(['doctor', '--build'])"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "           the build failed: no C++ compiler (g++ or $CXX)" in done.stdout
    assert "MLX's own (not built for this machine yet" in done.stdout
    assert "           fix: mlx-edge doctor --build (needs g++" in done.stdout


def test_doctor_flags_an_untested_version(monkeypatch):
    from mlx_edge import doctor

    real = doctor._installed
    monkeypatch.setattr(doctor, "_installed", lambda dist: "2.4.0" if dist == "numpy" else real(dist))
    checks = {c.name: c for c in doctor.check_packages()}
    assert not checks["numpy"].ok and 'pip install "numpy>=1.26,<2.3"' in checks["numpy"].fix
    assert checks["mlx"].ok


def test_data_summary_counts_and_token_lengths(tmp_path, tiny_bert_dir):
    rows = [("Pay the credit card bill", "finance"), ("Run 5km in the park", "health")] * 10
    (tmp_path / "t.tsv").write_text("".join(f"{t}\t{l}\n" for t, l in rows))
    result = CliRunner().invoke(main, ["data", str(tmp_path / "t.tsv"), "--json", "--tokenizer", str(tiny_bert_dir)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["labels"] == ["finance", "health"]
    assert summary["train"]["examples"] + summary["dev"]["examples"] == 20
    assert summary["dev"]["counts"] == {"finance": 1, "health": 1}
    assert 3 <= summary["tokens"]["p50"] <= summary["tokens"]["p100"]


@pytest.mark.parametrize("backend", ["mlx", "onnx"])
def test_predict_matches_transformers(tiny_bert_dir, backend, tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path / "cache"))  # the ONNX program is exported into it
    texts = ["Pay the credit card bill", "复习线性代数第三章"]
    result = CliRunner().invoke(main, ["predict", str(tiny_bert_dir), *texts, "--json", "--backend", backend])
    assert result.exit_code == 0, result.output
    answered = {"mlx": "mlx-cpu", "onnx": "onnxruntime-cpu"}[backend]
    assert f"answered by {answered}" in result.stderr
    got = [json.loads(line) for line in result.stdout.splitlines()]
    assert {row["backend"] for row in got} == {answered}
    model = BertForSequenceClassification.from_pretrained(tiny_bert_dir).eval()
    enc = AutoTokenizer.from_pretrained(tiny_bert_dir)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        ref = torch.softmax(model(**enc).logits, dim=-1).numpy()
    for row, probs in zip(got, ref):
        ours = np.array([row["probabilities"][model.config.id2label[i]] for i in range(len(probs))])
        np.testing.assert_allclose(ours, probs, atol=1e-5)
        assert row["label"] == model.config.id2label[int(probs.argmax())]


def test_predict_table_keeps_one_line_per_text_and_json_the_whole_text(tiny_bert_dir):
    long = "buy milk " * 300 + "and eggs"
    texts = [long, "first line\nsecond line", "Pay the bill"]
    table = CliRunner().invoke(main, ["predict", str(tiny_bert_dir), *texts, "--backend", "mlx"])
    assert table.exit_code == 0, table.output
    rows = table.stdout.splitlines()
    assert len(rows) == 3  # the line break inside text 2 does not start a row of its own
    assert rows[0].endswith("   " + long[:79] + "…")  # 80 characters shown
    assert rows[1].endswith("first line second line") and rows[2].endswith("Pay the bill")
    as_json = CliRunner().invoke(main, ["predict", str(tiny_bert_dir), *texts, "--backend", "mlx", "--json"])
    assert [json.loads(line)["text"] for line in as_json.stdout.splitlines()] == texts


def test_predict_exports_its_onnx_program_once_per_weights(tiny_bert_dir, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)

    def run():
        result = CliRunner().invoke(main, ["predict", str(model), "Pay the bill", "--json", "--backend", "onnx"])
        assert result.exit_code == 0, result.output
        return result.stderr, json.loads(result.stdout)["probabilities"]

    first, before = run()
    again, same = run()
    assert "exporting model to ONNX once" in first and "exporting" not in again
    assert same == before
    programs = list((tmp_path / "cache" / "onnx").glob("*/model.onnx"))
    assert len(programs) == 1 and not list((tmp_path / "cache" / "onnx").glob("*/.*"))  # no staging file left
    # new weights: a new program, not the stale one
    net = BertForSequenceClassification.from_pretrained(model)
    with torch.no_grad():
        net.classifier.bias += torch.arange(net.config.num_labels, dtype=torch.float32)
    net.save_pretrained(model, safe_serialization=True)
    changed, after = run()
    assert "exporting" in changed and after != before
    assert len(list((tmp_path / "cache" / "onnx").glob("*/model.onnx"))) == 2


def test_predict_refuses_onnx_on_a_gpu(tiny_bert_dir):
    result = CliRunner().invoke(main, ["predict", str(tiny_bert_dir), "Pay", "--backend", "onnx", "--device", "gpu"])
    assert result.exit_code != 0
    assert "--backend onnx runs on the CPU" in result.output and "Traceback" not in result.output


def test_data_reports_the_unknown_token_share_and_warns_once(tmp_path, tiny_bert_dir):
    from transformers import AutoTokenizer

    korean = ["회의 자료 준비하기", "병원 예약 확인", "다음 주 시험 공부"]
    english = ["Pay the credit card bill", "Book a dentist appointment next Tuesday", "Buy groceries for the week"]
    reference = AutoTokenizer.from_pretrained(tiny_bert_dir)
    for texts, warned in ((korean, True), (english, False)):
        path = tmp_path / f"{warned}.tsv"
        path.write_text("".join(f"{t}\t{'a' if i % 2 else 'b'}\n" for i, t in enumerate(texts * 4)))
        tokens = [tok for t in texts * 4 for tok in reference.tokenize(t)]
        expected = sum(tok == reference.unk_token for tok in tokens) / len(tokens)
        result = CliRunner().invoke(main, ["data", str(path), "--dev", str(path), "--tokenizer", str(tiny_bert_dir)])
        assert result.exit_code == 0, result.output
        assert f"unknown tokens: {expected:.1%}" in result.output
        warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
        assert (warnings == [w for w in warnings if f"{expected:.0%} of the tokens" in w]) and (len(warnings) == warned)
    assert expected == 0.0  # the English rows: every word is in the tiny vocabulary


def test_data_caps_the_max_length_advice_at_the_models_positions(tiny_bert_dir, tmp_path):
    # the tiny model has 64 positions; two texts of ~150 tokens push p99 past them
    rows = [("pay the bill " * 50).strip() if i < 2 else f"pay bill {i}" for i in range(20)]
    path = tmp_path / "long.tsv"
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{'a' if i % 2 else 'b'}\n" for i, t in enumerate(rows)))
    result = CliRunner().invoke(main, ["data", str(path), "--dev", str(path), "--tokenizer", str(tiny_bert_dir)])
    assert result.exit_code == 0, result.output
    assert "reads at most 64 tokens (--max-length 64): 10.0% of examples are cut" in result.output
    assert "covers 99%" not in result.output


def test_data_summary_keeps_hundreds_of_labels_to_one_line(tmp_path):
    """Columns read crossed give one label per row: the summary says so briefly, --json keeps them all."""
    path = tmp_path / "crossed.tsv"
    path.write_text("label\ttext\n" + "".join(f"text number {i}\tsame\n" for i in range(100)), encoding="utf-8")
    result = CliRunner().invoke(main, ["data", str(path)])
    assert result.exit_code == 0, result.output
    labels_line = next(line for line in result.output.splitlines() if line.startswith("labels (100)"))
    assert labels_line.endswith("and 70 more (--json lists all)")
    assert "look swapped" in result.output
