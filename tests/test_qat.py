"""Quantization-aware distillation (`distill --quantize int4|int8`) and the exact export of its codes.

The fake-quantized forward is MLX's stored quantization (mx.dequantize of the packed codes) and as
fine as MLX's own grid; gradients pass straight through and a step lowers the loss; the codes go
into the CoreML program as constexpr_blockwise_shift_scale with nothing rounded again, so the
program (run by the NumPy MIL interpreter) computes the MLX quantized student's function within the
float tolerances, and a flipped code in weight.bin is caught. A factorized embedding (embedding_size)
travels the same way. Tiny models built here; the tiny teacher comes from conftest.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest
from click.testing import CliRunner

from bridges.check_numeric import encode
from bridges.mil_numpy import load_program, run_program
from mlx_edge.cli import main
from mlx_edge.distill.factorize import low_rank
from mlx_edge.distill.quant import FakeQuantLinear, fake_quantize, fake_quantize_model, spec_for, to_quantized
from mlx_edge.errors import CHECK_FAILED
from mlx_edge.fileio import sha256_file
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, init_weights
from mlx_edge.models.checkpoint import load_model, read_float_weights, save_model
from mlx_edge.models.quantized import cpu_float, pack, unpack
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.cli import assert_one_line_error
from tests.helpers.tiny import LABELS, build_wordpiece

IOS18 = ("--min-target", "iOS18")
WEIGHT_BLOB = "Encoder.mlpackage/Data/com.apple.CoreML/weights/weight.bin"
TEXTS = ["Pay the credit card bill", "复习线性代数第三章", "Book a dentist appointment next Tuesday", "run 5km"]
# widths MLX can quantize in groups of 32, with a factorized embedding (rows of 32 projected to 64)
WIDE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, embedding_size=32)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("qat")


@cache
def _students(root: Path) -> dict[str, Path]:
    """A random float student (factorized embedding) and its int8 / int4 quantized selves."""
    tok = build_wordpiece(root / "tok")
    vocab = sum(1 for _ in open(tok / "vocab.txt", encoding="utf-8"))
    config = BertConfig(
        vocab_size=vocab, max_position_embeddings=64, initializer_range=0.1, id2label=dict(enumerate(LABELS)), **WIDE
    )
    out = {}
    for name in ("float", "int8", "int4"):
        model = BertForSequenceClassification(config)
        init_weights(model, seed=3)
        if name != "float":
            model = to_quantized(fake_quantize_model(model, spec_for(name, 32)))
        out[name] = save_model(model, root / name, tokenizer_from=tok)
    return out


@cache
def _bundle(root: Path, name: str, precision: str) -> Path:
    out = root / f"bundle-{name}-{precision}"
    args = ["export", str(_students(root)[name]), "--out", str(out), "--seq-len", "24", "--n-texts", "8", "--quiet"]
    args += ["--precision", precision, "--quantize", f"{name}-block", *IOS18]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out


def _results(report: dict) -> dict:
    return {r["name"]: r for r in (report["checks"]["results"] if "checks" in report else report["results"])}


# --- the fake-quantized forward ---------------------------------------------------------------


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_the_fake_quantized_student_is_the_mlx_quantized_student(bits):
    config = BertConfig(vocab_size=50, id2label=dict(enumerate(LABELS)), **WIDE)
    model = BertForSequenceClassification(config)
    init_weights(model, seed=1)
    model.eval()
    spec = spec_for(bits, 32)
    fake = fake_quantize_model(model, spec)
    quantized = to_quantized(fake)
    layers = [p for p, m in quantized.named_modules() if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))]
    assert len(layers) == 15 and "classifier" not in layers  # 2 x 6 linear, pooler, word rows, projection
    for path in layers:
        stored = _module(quantized, path)
        w, s, b = stored.weight, stored.scales, stored.biases
        # what training sees is mx.dequantize of what is stored (MLX's affine layout), exactly
        expected = mx.dequantize(w, s, b, group_size=32, bits=spec.bits)
        assert mx.array_equal(fake_quantize(_module(fake, path).weight, spec), expected).item(), path
        # scales are fp16 numbers and biases whole multiples of them: CoreML holds both exactly
        assert np.array_equal(np.array(s).astype(np.float16).astype(np.float32), np.array(s))
        offsets = -np.array(b) / np.array(s)
        assert np.array_equal(offsets, np.round(offsets)) and 0 <= offsets.min() <= offsets.max() <= 2**spec.bits - 1
    ids = mx.array([[2, 7, 11, 30, 3]])
    # MLX's quantized kernels (quantized_matmul, the quantized embedding) compute the same function
    assert mx.allclose(fake(ids).logits, quantized(ids).logits, atol=1e-5, rtol=0).item()
    # the grid is as fine as MLX's own quantization of the same weight (min/max per group of 32)
    w = _module(fake, "bert.encoder.layer.0.intermediate.dense").weight
    own = mx.dequantize(*mx.quantize(w, group_size=32, bits=spec.bits), group_size=32, bits=spec.bits)
    err_ours, err_mlx = (float(mx.abs(w - v).max()) for v in (fake_quantize(w, spec), own))
    assert 0 < err_ours <= 1.05 * err_mlx


def _module(model, path: str):
    node = model
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def test_pack_is_mlx_layout():
    mx.random.seed(1)
    w = mx.random.normal((3, 64))
    for bits in (4, 8):
        packed, scales, biases = mx.quantize(w, group_size=32, bits=bits)
        q = unpack(np.array(packed), bits)
        # dequantizing with scale 1 and bias 0 reads the codes back through MLX itself
        ones = mx.dequantize(packed, mx.ones_like(scales), mx.zeros_like(biases), group_size=32, bits=bits)
        assert np.array_equal(q, np.array(ones).astype(np.uint8))
        assert np.array_equal(pack(q, bits), np.array(packed))


def test_gradients_pass_straight_through_and_a_qat_step_lowers_the_loss():
    mx.random.seed(2)
    spec = spec_for("int4", 32)
    x, target = mx.random.normal((64, 32)), mx.random.normal((64, 8))
    layer = FakeQuantLinear(nn.Linear(32, 8), spec)

    def loss(model):
        return ((model(x) - target) ** 2).mean()

    grads = nn.value_and_grad(layer, loss)(layer)[1]
    plain = nn.Linear(32, 8)
    plain.weight, plain.bias = fake_quantize(layer.weight, spec), layer.bias
    plain_grads = nn.value_and_grad(plain, loss)(plain)[1]
    # straight through: the float weight gets the gradient of the quantized weight it stands for
    assert mx.allclose(grads["weight"], plain_grads["weight"], atol=1e-7).item()
    assert float(mx.abs(grads["weight"]).sum()) > 0
    opt, step = optim.Adam(learning_rate=1e-2), nn.value_and_grad(layer, loss)
    before = loss(layer).item()
    for _ in range(30):
        _, g = step(layer)
        opt.update(layer, g)
        mx.eval(layer.parameters(), opt.state)
    assert loss(layer).item() < 0.8 * before


def test_low_rank_split_of_a_table_is_exact_at_its_rank():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 3)) @ rng.normal(size=(3, 16)) + rng.normal(size=16)  # rank 3 around a mean
    rows, weight, bias = low_rank(table, 3)
    assert rows.shape == (50, 3) and weight.shape == (16, 3)
    np.testing.assert_allclose(rows @ weight.T + bias, table, atol=1e-5)


# --- export: the student's codes, exactly -----------------------------------------------------


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_program_holds_the_students_codes_and_computes_the_quantized_student(root, bits):
    bundle = _bundle(root, bits, "fp32")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["quantize"] == {
        "mode": f"{bits}-block",
        "bits": int(bits[3:]),
        "block_size": 32,
        "codes": "student",
    }
    results = _results(manifest)
    assert all(r["ok"] for r in results.values()), [r for r in results.values() if not r["ok"]]
    # 2 layers x 6 linear weights, the pooler, the word rows and their projection: the student's own codes
    assert results["weights.encoder"]["figures"]["student_codes"] == 15
    assert results["weights.encoder"]["figures"]["max_abs_diff_codes"] == 0.0
    program = load_program(bundle / "Encoder.mlpackage")
    ops = [o for o in program.functions["main"].operations if o.op_type == "constexpr_blockwise_shift_scale"]
    # int8 trains on the symmetric grid: signed codes and no offset; int4 keeps each block's offset
    assert {(o.offset is None, o.data.val.dtype.name) for o in ops} == (
        {(True, "int8")} if bits == "int8" else {(False, "uint8")}  # uint4 reads back as uint8
    )
    student = load_model(_students(root)[bits])
    assert isinstance(student.bert.encoder.layer[0].intermediate.dense, nn.QuantizedLinear)
    for ids, mask in encode(load_tokenizer(bundle), TEXTS, _seq()):
        got = run_program(program, {"input_ids": ids, "attention_mask": mask})
        want = student(mx.array(ids), mx.array(mask))
        np.testing.assert_allclose(got["logits"], np.array(want.logits), atol=2e-5, rtol=0)
        np.testing.assert_allclose(got["embedding"], np.array(want.pooled), atol=2e-5, rtol=0)


def _seq():
    from bridges.coreml_export import parse_seq_len

    return parse_seq_len("24")


def test_an_fp16_program_holds_the_codes_bit_for_bit_and_check_passes(root):
    bundle = _bundle(root, "int4", "fp16")
    program = load_program(bundle / "Encoder.mlpackage")
    ops = [o for o in program.functions["main"].operations if o.op_type == "constexpr_blockwise_shift_scale"]
    assert len(ops) == 15
    op = next(o for o in ops if o.outputs[0].name.startswith("bert_encoder_layer_1_output_dense_weight"))
    layer = load_model(_students(root)["int4"]).bert.encoder.layer[1].output.dense
    assert np.array_equal(op.data.val.astype(np.uint8), unpack(np.array(layer.weight), 4))
    assert op.scale.val.dtype == np.float16 and np.array_equal(op.scale.val.astype(np.float32), np.array(layer.scales))
    assert np.array_equal(-op.offset.val.astype(np.float32) * op.scale.val.astype(np.float32), np.array(layer.biases))
    result = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "8", "--json"])
    assert result.exit_code == 0, result.output
    parity = _results(json.loads(result.output))["parity.encoder.program"]["figures"]
    assert parity["compared"] == ["embedding", "logits"] and parity["tolerance"] == 2e-2  # fp16's, not int4's 0.10


def test_a_flipped_code_in_weight_bin_is_caught_by_check(root, tmp_path):
    import shutil

    bundle = Path(shutil.copytree(_bundle(root, "int8", "fp32"), tmp_path / "bundle"))
    layer = load_model(_students(root)["int8"]).bert.encoder.layer[0].intermediate.dense
    # int8 codes are stored one per byte, as signed codes - 128 (the symmetric grid has no offset)
    codes = (unpack(np.array(layer.weight), 8).astype(np.int16) - 128).astype(np.int8)
    blob = bundle / WEIGHT_BLOB
    data = bytearray(blob.read_bytes())
    at = bytes(data).find(codes.tobytes())
    assert at > 0
    data[at : at + 64] = (-codes.reshape(-1)[:64]).tobytes()
    blob.write_bytes(bytes(data))
    manifest = json.loads((bundle / "manifest.json").read_text())  # resealed: the numbers must tell
    manifest["files"][WEIGHT_BLOB] = {"sha256": sha256_file(blob), "bytes": blob.stat().st_size}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "8", "--json"])
    assert result.exit_code == CHECK_FAILED, result.output
    results = _results(json.loads(result.output))
    assert not results["weights.encoder"]["ok"] and results["files.sha256"]["ok"]
    assert (
        "intermediate_dense_weight_quantized differs from the student's codes" in results["weights.encoder"]["detail"]
    )


def test_check_holds_codes_and_floats_of_a_quantized_student_to_the_student_exactly():
    from bridges.checks import compare_weights

    rng = np.random.default_rng(0)
    state = {"bert.pooler.dense.weight": rng.normal(size=(64, 64)), "classifier.weight": rng.normal(size=(6, 400))}
    state = {k: v.astype(np.float32) for k, v in state.items()}
    exact = {
        "bert_pooler_dense_weight_quantized": state["bert.pooler.dense.weight"],
        "classifier_weight": state["classifier.weight"],  # above the threshold, yet float in the student
    }
    kwargs = dict(precision="fp32", quantize="int4-block", student_codes={"bert.pooler.dense.weight"})
    assert compare_weights(exact, state, **kwargs)[0] == []
    nudged = {**exact, "classifier_weight": exact["classifier_weight"] + np.float32(1e-6)}
    assert "classifier_weight differs from the student's weight" in compare_weights(nudged, state, **kwargs)[0][0]
    floats = {
        "bert_pooler_dense_weight": state["bert.pooler.dense.weight"],
        "classifier_weight": exact["classifier_weight"],
    }
    problems = compare_weights(floats, state, **kwargs)[0]
    assert problems == [
        "bert_pooler_dense_weight is not compressed; the student holds bert.pooler.dense.weight as codes"
    ]


@pytest.mark.parametrize(
    "options, fragments",
    [
        (("--quantize", "int8-block", *IOS18), ["holds int4 codes in blocks of 32", "--quantize int4-block"]),
        (("--quantize", "int4-block", "--block-size", "16", *IOS18), ["not --quantize int4-block --block-size 16"]),
        ((), ["holds int4 codes", "--min-target iOS18"]),
    ],
)
def test_a_quantized_student_exports_only_as_it_is_quantized(root, options, fragments):
    result = CliRunner().invoke(main, ["export", str(_students(root)["int4"]), "--out", str(root / "x"), *options])
    assert_one_line_error(result, *fragments)
    assert not (root / "x").exists()


def test_biases_that_are_not_whole_multiples_of_scales_are_refused(root, tmp_path):
    model = load_model(_students(root)["float"])
    nn.quantize(model, 32, 4, class_predicate=lambda p, m: p == "bert.pooler.dense")  # MLX's own grid
    pooler = model.bert.pooler.dense
    pooler.biases = pooler.biases + 0.3 * pooler.scales  # mid-step: no integer offset exists
    model.config.quantization = {"bits": 4, "group_size": 32, "mode": "affine"}
    student = save_model(model, tmp_path / "s", tokenizer_from=_students(root)["float"])
    args = ["export", str(student), "--out", str(tmp_path / "b"), "--quantize", "int4-block", *IOS18]
    assert_one_line_error(CliRunner().invoke(main, args), "bert.pooler.dense", "not whole multiples of their scales")


# --- distill --quantize -----------------------------------------------------------------------


def _distill(teacher, train, out, *options):
    args = ["distill", "--teacher", str(teacher), "--train", str(train), "--out", str(out), "--epochs", "1"]
    return CliRunner().invoke(main, [*args, "--batch-size", "16", "--learning-rate", "2e-3", "--quiet", *options])


def test_distill_quantize_saves_a_quantized_student_and_continues_it(trained_teacher, toy_data, tmp_path):
    config = tmp_path / "student.json"
    config.write_text(json.dumps({"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4,
                                  "intermediate_size": 64, "embedding_size": 32}))  # fmt: skip
    bad = _distill(trained_teacher, toy_data[0], tmp_path / "x", "--student", str(config), "--quantize", "int4")
    assert_one_line_error(bad, "embedding_size 32 is not below hidden_size 32")
    config.write_text(json.dumps({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
                                  "intermediate_size": 64, "embedding_size": 32}))  # fmt: skip
    result = _distill(trained_teacher, toy_data[0], tmp_path / "s4", "--student", str(config), "--quantize", "int4")
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "s4" / "config.json").read_text())
    assert saved["quantization"] == {"bits": 4, "group_size": 32, "mode": "affine"} and saved["embedding_size"] == 32
    student = load_model(tmp_path / "s4")
    assert isinstance(student.bert.embeddings.word_embeddings, nn.QuantizedEmbedding)
    assert isinstance(student.classifier, nn.Linear)  # the head stays float (the device trains it)
    report = json.loads((tmp_path / "s4" / "report.json").read_text())
    assert 0 <= report["student_dev_accuracy"] <= 1
    # its parameters are the float weights its codes stand for, not the packed words
    assert report["student_parameters"] == sum(v.size for v in read_float_weights(tmp_path / "s4").values())
    # continued: only quantized (its codes would otherwise be dropped without a word)
    s4 = str(tmp_path / "s4")
    assert_one_line_error(
        _distill(trained_teacher, toy_data[0], tmp_path / "c", "--student", s4), "--quantize int4 --block-size 32"
    )
    again = _distill(trained_teacher, toy_data[0], tmp_path / "s8", "--student", s4, "--quantize", "int8")
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "s8" / "config.json").read_text())["quantization"]["bits"] == 8


def test_quantize_refuses_a_student_that_is_not_bert():
    from types import SimpleNamespace

    from mlx_edge.distill.quant import student_spec
    from mlx_edge.errors import DistillError

    static = SimpleNamespace(model_type="static", quantization=None, hidden_size=64)  # a token-table student's config
    with pytest.raises(DistillError, match="this student is 'static'"):
        student_spec("int4", 32, static, continuing=False)


@pytest.mark.parametrize(
    "options, fragments",
    [
        (("--block-size", "24"), ["--block-size 24 is not a group size MLX quantizes with", "32, 64, 128"]),
        (("--block-size", "64"), ["--block-size 64 does not divide", "hidden_size 32", "use --block-size 32"]),
        (("--student", "tiny"), ["does not divide the student's hidden_size 312", "multiples of 32"]),
    ],
)
def test_distill_quantize_refuses_blocks_that_do_not_fit(trained_teacher, toy_data, tmp_path, options, fragments):
    config = tmp_path / "student.json"
    config.write_text(json.dumps({"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4,
                                  "intermediate_size": 64}))  # fmt: skip
    result = _distill(trained_teacher, toy_data[0], tmp_path / "s", "--student", str(config), "--quantize", "int4",
                      *options)  # fmt: skip
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_predictions_on_the_cpu_run_a_float_twin_with_the_same_weights(root, bits):
    """MLX's CPU quantized matmul is many times slower than float BLAS: predictions there (the report,
    predict, a run's dev scores) use a dequantized twin, which must say exactly what the model says."""
    quantized = load_model(_students(root)[bits], require_head=True)
    quantized.eval()
    twin = cpu_float(quantized)
    kinds = (nn.QuantizedLinear, nn.QuantizedEmbedding)
    assert not any(isinstance(m, kinds) for _, m in twin.named_modules())
    assert any(isinstance(m, kinds) for _, m in quantized.named_modules())  # the model itself is untouched
    assert twin.config.quantization is None and quantized.config.quantization is not None
    ids = mx.array([[2, 7, 11, 30, 3, 5, 9, 4]])
    assert mx.allclose(twin(ids).logits, quantized(ids).logits, atol=1e-5, rtol=0).item()
    float_student = load_model(_students(root)["float"], require_head=True)
    assert cpu_float(float_student) is float_student  # nothing to dequantize
