"""runtime/kernels.py + cpu_kernels.cpp: mlx-edge's C++ CPU kernels for MLX build here (once, in a child
process, under a lock), compute what MLX's own ops compute (values and gradients, compiled, on a second
CPU stream), refuse a second derivative, and anything that stops them (not built, a damaged library,
no compiler, a failing or crashing self-test) leaves the MLX expressions in place with the reason said.

The references are MLX's native ops and a float64 NumPy LayerNorm; nothing is mocked: the builds are
real g++ builds, a broken one made by a compiler wrapper that edits the source it is handed. The
fallback tests run in fresh interpreters with a cache of their own (the kernels load once per process)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from mlx_edge.models import fastmath
from mlx_edge.runtime import kernels

ROOT = Path(__file__).resolve().parents[1]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C++ kernels are built on Linux only")


@pytest.fixture(scope="module")
def k():
    if sys.platform.startswith("linux"):
        try:
            kernels.build()  # scripts/setup.sh built them (doctor --build): then this only finds them
        except OSError as exc:
            pytest.fail(f"the C++ kernels should build on this Linux machine (scripts/setup.sh installs g++): {exc}")
    module = kernels.load()
    if module is None and sys.platform.startswith("linux"):
        pytest.fail(f"the C++ kernels should load on this Linux machine: {kernels.problem()}")
    if module is None:
        pytest.skip(kernels.problem() or "no kernels")
    return module


def _rng(seed=0):
    return np.random.default_rng(seed)


@linux
def test_softmax_and_its_gradient_match_mlx_with_masked_keys_and_odd_widths(k):
    rng = _rng(1)
    for shape in [(2, 3, 7, 13), (5, 128), (1, 1)]:
        x = rng.normal(scale=4.0, size=shape).astype(np.float32)
        x[..., ::3] = np.finfo(np.float32).min  # masked keys: exactly 0 weight
        x = mx.array(x)
        g = mx.array(rng.normal(size=shape).astype(np.float32))
        ours, ref = k.softmax(x), mx.softmax(x, axis=-1, precise=True)
        np.testing.assert_allclose(np.array(ours), np.array(ref), atol=3e-7)
        if shape[-1] > 1:
            assert (np.array(ours)[..., ::3] == 0).all()
        got = mx.grad(lambda v, g=g: (k.softmax(v) * g).sum())(x)
        want = mx.grad(lambda v, g=g: (mx.softmax(v, axis=-1, precise=True) * g).sum())(x)
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
    transposed = mx.array(rng.normal(size=(6, 9)).astype(np.float32)).T  # a strided view: made contiguous first
    np.testing.assert_allclose(np.array(k.softmax(transposed)), np.array(mx.softmax(transposed, axis=-1)), atol=3e-7)


def _attention_reference(q, k, v, mask, heads, scale):
    """MLX's own ops only (no mlx-edge kernel): split heads, masked scores, mx.softmax, merge."""
    B, Lq, _ = q.shape
    qh, kh, vh = (t.reshape(B, t.shape[1], heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
    scores = (qh * scale) @ kh.transpose(0, 1, 3, 2) + mask
    return (mx.softmax(scores, axis=-1, precise=True) @ vh).transpose(0, 2, 1, 3).reshape(B, Lq, -1)


@linux
@pytest.mark.parametrize(
    "batch, length, heads, head_dim",
    [(1, 128, 12, 26), (3, 37, 4, 32), (2, 5, 2, 64), (1, 1, 3, 5), (2, 17, 1, 7)],
)
def test_the_inference_attention_matches_mlx_values_and_gradients(k, batch, length, heads, head_dim):
    rng = _rng(batch * 1000 + length)
    q, kk, v = (
        mx.array(rng.normal(scale=2.0, size=(batch, length, heads * head_dim)).astype(np.float32)) for _ in range(3)
    )
    keep = np.ones((batch, length), bool)
    keep[-1, max(1, length // 2) :] = False  # the last row is padded after its first half
    mask = mx.array(np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)[:, None, None, :])
    scale = 1.0 / np.sqrt(head_dim)
    want = _attention_reference(q, kk, v, mask, heads, scale)
    np.testing.assert_allclose(
        np.array(k.attention(q, kk, v, mask, heads, scale)), np.array(want), rtol=1e-5, atol=1e-5
    )
    got = fastmath.attention(q, kk, v, mask, heads, scale)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
    compiled = mx.compile(lambda a, b, c: fastmath.attention(a, b, c, mask, heads, scale))
    np.testing.assert_allclose(np.array(compiled(q, kk, v)), np.array(want), rtol=1e-5, atol=1e-5)
    # a gradient (an eval-mode model under mx.grad, as the bench's check step) comes from the explicit form
    g = mx.array(rng.normal(size=want.shape).astype(np.float32))
    ours = mx.grad(lambda a, b, c: (fastmath.attention(a, b, c, mask, heads, scale) * g).sum(), argnums=(0, 1, 2))
    theirs = mx.grad(lambda a, b, c: (_attention_reference(a, b, c, mask, heads, scale) * g).sum(), argnums=(0, 1, 2))
    for a, b in zip(ours(q, kk, v), theirs(q, kk, v)):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=5e-5)


@linux
@pytest.mark.parametrize(
    "batch, length, queries, heads, head_dim", [(2, 128, 1, 12, 26), (3, 37, 5, 4, 32), (1, 70, 1, 6, 24)]
)
def test_the_inference_attention_takes_fewer_query_rows_than_keys(k, batch, length, queries, heads, head_dim):
    """The last layer of a [CLS]-pooled model asks for its first row alone: the same numbers as those
    rows of the full attention, and of MLX's own ops, with padded keys still masked."""
    rng = _rng(batch * 100 + length)
    q, kk, v = (
        mx.array(rng.normal(scale=2.0, size=(batch, length, heads * head_dim)).astype(np.float32)) for _ in range(3)
    )
    keep = np.ones((batch, length), bool)
    keep[-1, length // 3 :] = False
    mask = mx.array(np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)[:, None, None, :])
    scale = 1.0 / np.sqrt(head_dim)
    first = q[:, :queries]
    want = _attention_reference(first, kk, v, mask, heads, scale)
    got = k.attention(first, kk, v, mask, heads, scale)
    assert got.shape == (batch, queries, heads * head_dim)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.array(got), np.array(k.attention(q, kk, v, mask, heads, scale))[:, :queries], rtol=1e-6, atol=1e-6
    )
    g = mx.array(rng.normal(size=want.shape).astype(np.float32))
    ours = mx.grad(lambda a, b, c: (fastmath.attention(a, b, c, mask, heads, scale) * g).sum(), argnums=(0, 1, 2))
    theirs = mx.grad(lambda a, b, c: (_attention_reference(a, b, c, mask, heads, scale) * g).sum(), argnums=(0, 1, 2))
    for a, b in zip(ours(first, kk, v), theirs(first, kk, v)):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=5e-5)


@linux
def test_the_inference_attention_refuses_what_it_cannot_compute(k):
    q = mx.zeros((1, 4, 6))
    mask = mx.zeros((1, 1, 1, 4))
    with pytest.raises(ValueError, match="heads must divide"):
        k.attention(q, q, q, mask, 4, 1.0)
    with pytest.raises(ValueError, match="one additive value per"):
        k.attention(q, q, q, mx.zeros((1, 1, 1, 3)), 2, 1.0)
    with pytest.raises(ValueError, match="k, v"):
        k.attention(q, mx.zeros((1, 5, 6)), q, mask, 2, 1.0)  # k and v of different lengths
    with pytest.raises(ValueError, match="no more query rows than keys"):
        k.attention(mx.zeros((1, 5, 6)), q, q, mask, 2, 1.0)
    with pytest.raises(ValueError, match="no derivative"):
        mx.grad(lambda a: k.attention(a, a, a, mask, 2, 1.0).sum())(q)
    # where the kernel cannot run, the caller gets None and runs the explicit form
    assert fastmath.attention(q.astype(mx.float16), q, q, mask, 2, 1.0) is None


@linux
@pytest.mark.parametrize("tanh", [False, True], ids=["erf", "tanh"])
def test_gelu_value_derivative_and_gradient_match_mlx(k, tanh):
    native = nn.gelu_approx if tanh else nn.gelu
    x = mx.array(np.concatenate([np.linspace(-12, 12, 4001), [-100.0, 0.0, 100.0]]).astype(np.float32))
    g = mx.array(_rng(2).normal(size=x.shape).astype(np.float32))
    value, derivative = k.gelu_pair(x, tanh=tanh)
    np.testing.assert_allclose(np.array(k.gelu(x, tanh=tanh)), np.array(native(x)), atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(np.array(value), np.array(native(x)), atol=2e-6, rtol=1e-5)
    want = mx.grad(lambda v: (native(v) * g).sum())(x)
    np.testing.assert_allclose(np.array(derivative * g), np.array(want), atol=1e-5)
    for fn in (lambda v: k.gelu(v, tanh=tanh), lambda v: k.gelu_pair(v, tanh=tanh)[0]):
        np.testing.assert_allclose(np.array(mx.grad(lambda v, fn=fn: (fn(v) * g).sum())(x)), np.array(want), atol=1e-5)


@linux
def test_layer_norm_matches_float64_and_every_gradient_matches_mlx(k):
    rng = _rng(3)
    x = rng.normal(loc=2.0, scale=3.0, size=(4, 5, 37)).astype(np.float32)
    w = rng.normal(size=37).astype(np.float32)
    b = rng.normal(size=37).astype(np.float32)
    x64 = x.astype(np.float64)
    xhat = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(
        np.array(k.layer_norm(mx.array(x), mx.array(w), mx.array(b), 1e-12)), xhat * w + b, atol=2e-5
    )
    g = mx.array(rng.normal(size=x.shape).astype(np.float32))

    def loss(fn):
        return lambda w_, b_, x_: (fn(x_, w_, b_, 1e-12) * g).sum()

    args = (mx.array(w), mx.array(b), mx.array(x))
    ours = mx.grad(loss(k.layer_norm), argnums=(0, 1, 2))(*args)
    ref = mx.grad(loss(mx.fast.layer_norm), argnums=(0, 1, 2))(*args)
    for name, a, r in zip(("weight", "bias", "x"), ours, ref):
        np.testing.assert_allclose(np.array(a), np.array(r), atol=2e-5, err_msg=name)
    only_x = mx.grad(loss(k.layer_norm), argnums=2)(*args)  # one argnum: the VJP picks the right output
    np.testing.assert_allclose(np.array(only_x), np.array(ref[2]), atol=2e-5)
    with pytest.raises(ValueError, match="weight and bias"):
        k.layer_norm(mx.array(x), mx.array(w[:5]), mx.array(b), 1e-12)


@linux
def test_dropout_kernel_draws_the_same_mask_as_the_expression_path(k, monkeypatch):
    x = mx.array(_rng(4).normal(size=(3, 4, 33, 17)).astype(np.float32))
    drop = fastmath.Dropout(0.2)
    mx.random.seed(11)
    ours = np.array(drop(x))
    with monkeypatch.context() as patched:
        patched.setattr(fastmath, "cpu_kernels", lambda: None)
        mx.random.seed(11)
        expression = np.array(drop(x))
    np.testing.assert_array_equal(ours, expression)  # same seed draw, same hash, same scale
    assert abs((ours != 0).mean() - 0.8) < 0.02
    seed = mx.array(5, mx.uint32)
    g = mx.ones(x.shape)
    grad = np.array(mx.grad(lambda v: (k.dropout(v, seed, 0.8) * g).sum())(x))
    kept = np.array(k.dropout(mx.ones(x.shape), seed, 0.8)) != 0
    np.testing.assert_allclose(grad, np.where(kept, 1 / 0.8, 0.0), rtol=1e-6)  # the backward pass reuses the mask
    with pytest.raises(ValueError, match="seed"):
        k.dropout(x, mx.array([5], mx.uint32), 0.8)


@linux
def test_kernels_run_compiled_shapeless_and_on_another_cpu_stream(k):
    x = mx.array(_rng(5).normal(size=(4, 16)).astype(np.float32))
    stream = mx.new_stream(mx.cpu)
    compiled = mx.compile(lambda v: k.softmax(v * 2.0) + 1.0)
    with mx.stream(stream):
        np.testing.assert_allclose(np.array(compiled(x)), np.array(mx.softmax(x * 2.0, axis=-1) + 1.0), atol=3e-7)
    shapeless = mx.compile(lambda v: k.gelu(v), shapeless=True)
    for rows in (4, 3):
        np.testing.assert_allclose(np.array(shapeless(x[:rows])), np.array(nn.gelu(x[:rows])), atol=2e-6)
    with pytest.raises(ValueError, match="float32"):
        k.softmax(x.astype(mx.float16))


@linux
def test_second_derivatives_raise_instead_of_being_wrong(k):
    # GELU's VJP reads only the value's cotangent: differentiating it again once gave 0 without a word
    x = mx.array(_rng(6).normal(size=(3, 8)).astype(np.float32))
    g = mx.array(_rng(7).normal(size=(3, 8)).astype(np.float32))
    cases = [
        ("softmax", k.softmax),
        ("GELU", k.gelu),
        ("GELU", lambda v: k.gelu(v, tanh=True)),
        ("GELU", lambda v: k.gelu_pair(v)[0]),  # the training form: its VJP multiplies by the kept derivative
        ("LayerNorm", lambda v: k.layer_norm(v, mx.ones((8,)), mx.zeros((8,)), 1e-5)),
    ]
    for name, fn in cases:
        first = mx.grad(lambda v, fn=fn: (fn(v) * g).sum())
        assert np.isfinite(np.array(first(x))).all()  # the first derivative is there
        with pytest.raises(ValueError, match=f"CPU {name} has no second derivative; set MLX_EDGE_CPU_KERNELS=0"):
            mx.eval(mx.grad(lambda v, first=first: first(v).sum())(x))
    # the derivative gelu_pair hands out: differentiating it is already a second derivative of GELU
    with pytest.raises(ValueError, match="CPU GELU has no second derivative"):
        mx.eval(mx.grad(lambda v: (k.gelu_pair(v)[1] * g).sum())(x))


@linux
def test_the_build_is_cached_and_checked_by_its_sidecar(k):
    path = kernels.build()
    stamp = path.stat().st_mtime_ns
    assert kernels.build() == path and path.stat().st_mtime_ns == stamp  # found, not rebuilt
    assert path == kernels.library_path() and path.name.startswith("mlx-edge-kernels-")
    assert (path.parent / (path.name + ".ok")).read_text().strip() == kernels._sha256(path)
    assert kernels._cpu_flags() is not None and "-march=native" in kernels._plan()[0]  # this CPU names itself


def test_the_cache_key_names_the_cpu_or_the_build_is_portable(tmp_path, monkeypatch):
    def cpuinfo(name, text):
        (tmp_path / name).write_text(text)
        return str(tmp_path / name)

    x86 = "processor\t: 0\nmodel name\t: Xeon X\ncpu MHz\t\t: 2000.1\nflags\t\t: fpu sse2 avx2\n"
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\nCPU part\t: 0xd0c\n"
    assert kernels._cpu_flags(cpuinfo("x86", x86)) == "fpu sse2 avx2"
    assert kernels._cpu_flags(cpuinfo("arm", arm)) == "fp asimd sve"
    # no flags line: the model name and a hash of the rest, the same whatever the clock reads
    a = kernels._cpu_flags(cpuinfo("a", "processor : 0\nmodel name : Core A\ncpu MHz : 1000.0\n"))
    again = kernels._cpu_flags(cpuinfo("b", "processor : 0\nmodel name : Core A\ncpu MHz : 2400.5\n"))
    other = kernels._cpu_flags(cpuinfo("c", "processor : 0\nmodel name : Core B\ncpu MHz : 1000.0\n"))
    assert a == again and "Core A" in a and other != a
    # nothing CPU-specific: no key for it, and the build gives up -march=native for a portable baseline
    for nothing in ("/nonexistent", cpuinfo("empty", ""), cpuinfo("bare", "processor : 0\ncpu MHz : 1.0\n")):
        assert kernels._cpu_flags(nothing) is None, nothing
    if not sys.platform.startswith("linux"):
        return
    native_flags, native_path = kernels._plan()
    monkeypatch.setattr(kernels, "_cpu_flags", lambda: None)
    flags, path = kernels._plan()
    assert "-march=native" in native_flags and "-march=native" not in flags and path != native_path
    portable = {"x86_64": "-march=x86-64-v2", "aarch64": "-march=armv8-a"}.get(platform.machine())
    assert portable is None or portable in flags


PROBE = """
import json, sys, mlx_edge, mlx.core as mx
from mlx_edge.models import fastmath
from mlx_edge.runtime import kernels
built = None
if sys.argv[1:] == ["build"]:  # what `mlx-edge doctor --build` does before its report
    try:
        kernels.build()
    except OSError as exc:
        built = str(exc)
x = mx.array([[0.0, 1.0, 2.0]])
print(json.dumps({"loaded": kernels.load() is not None, "problem": kernels.problem(), "build_error": built,
                  "softmax": fastmath.softmax(x).tolist(), "describe": kernels.describe()}))
"""
SOFTMAX = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()


@linux
def test_reading_mlxs_nanobind_registry_leaves_it_intact(k):
    # the registry key is read through the interpreter's state dict; a reference miscounted there
    # once freed the dict, and MLX's arrays stopped converting ("incompatible function arguments")
    for _ in range(5):
        version, domain = kernels._mlx_nanobind_abi()
    assert version.isdigit() and domain == "mlx"
    np.testing.assert_allclose(np.array(k.softmax(mx.zeros((1, 4)))), [[0.25] * 4])
    # and in a fresh interpreter, where the library is imported after the registry was read
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["loaded"] is True


def _env(tmp_path, **env) -> dict:
    full = {**os.environ, "MLX_EDGE_CACHE": str(tmp_path / "cache"), **env}
    return {name: value for name, value in full.items() if value is not None}  # None: unset


def _probe(tmp_path, *args, **env) -> tuple[dict, str]:
    """(what a fresh interpreter reports, its stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=ROOT, env=_env(tmp_path, **env), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _said_once(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("mlx-edge: CPU kernels off: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def _no_compiler(tmp_path) -> dict:
    """PATH without g++ (or cc), CXX unset."""
    (tmp_path / "empty-bin").mkdir(exist_ok=True)
    return {"PATH": str(tmp_path / "empty-bin"), "CXX": None}


def _cached_files(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "cache" / "kernels").glob("*")) if (tmp_path / "cache").exists() else []


def _assert_fell_back(out):
    assert out["loaded"] is False and out["describe"].startswith("MLX's own (")
    np.testing.assert_allclose(out["softmax"][0], SOFTMAX, atol=1e-6)  # still right, by the expressions


@linux
def test_without_a_library_or_a_compiler_the_reason_names_the_build_command(tmp_path):
    out, stderr = _probe(tmp_path, "build", **_no_compiler(tmp_path))
    _assert_fell_back(out)
    assert "no C++ compiler" in out["build_error"]
    assert "not built" in out["problem"] and "`mlx-edge doctor --build`" in out["problem"]
    assert out["problem"] in _said_once(stderr)
    assert not [name for name in _cached_files(tmp_path) if name.startswith("mlx-edge-kernels-")]


@linux
def test_a_built_library_is_used_on_a_machine_without_a_compiler(k, tmp_path):
    # the key has no compiler version in it: what setup built is found where g++ is gone
    built = kernels.library_path()
    target = tmp_path / "cache" / "kernels" / built.name
    target.parent.mkdir(parents=True)
    shutil.copy2(built, target)
    shutil.copy2(built.with_name(built.name + ".ok"), target.with_name(target.name + ".ok"))
    out, stderr = _probe(tmp_path, "build", **_no_compiler(tmp_path))  # build(): found, nothing to compile
    assert out["loaded"] is True and out["problem"] is None and out["build_error"] is None, out
    assert out["describe"] == "vectorized (mlx-edge C++)" and "CPU kernels off" not in stderr
    np.testing.assert_allclose(out["softmax"][0], SOFTMAX, atol=1e-6)


@linux
@pytest.mark.parametrize("sidecar", ["none", "another file's", "its own"])
def test_a_damaged_library_in_the_cache_is_not_used(k, tmp_path, sidecar, monkeypatch):
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path / "cache"))
    target = kernels.library_path()
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\x7fELF garbage, not a library" * 100)
    if sidecar != "none":
        digest = kernels._sha256(target) if sidecar == "its own" else "0" * 64
        target.with_name(target.name + ".ok").write_text(digest + "\n")
    out, stderr = _probe(tmp_path)
    _assert_fell_back(out)
    said = _said_once(stderr)
    if sidecar == "its own":  # vouched for, so opened: the loader's error is caught, not raised
        assert out["problem"] and out["problem"] in said
    else:  # never dlopen'ed
        assert "damaged, rebuild with mlx-edge doctor --build" in out["problem"] and out["problem"] in said


def _wrapper(tmp_path, edit: str) -> Path:
    """A CXX that compiles an edited copy of cpu_kernels.cpp: a library that builds but is wrong."""
    edits = {
        # a softmax that sums to 1/2
        "wrong": (
            "float inv = shifted_exp_row(x + r * n, o, n);",
            "float inv = 0.5f * shifted_exp_row(x + r * n, o, n);",
        ),
        "crash": (
            "float inv = shifted_exp_row(x + r * n, o, n);",
            "float inv = shifted_exp_row(x + r * n, o, n); std::raise(SIGSEGV);",
        ),
    }
    old, new = edits[edit]
    script = tmp_path / f"{edit}-g++"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "args = []\n"
        "for a in sys.argv[1:]:\n"
        "    if a.endswith('cpu_kernels.cpp'):\n"
        "        text = open(a).read()\n"
        f"        assert {old!r} in text\n"
        f"        text = '#include <csignal>\\n' + text.replace({old!r}, {new!r})\n"
        f"        a = {str(tmp_path / 'edited.cpp')!r}\n"
        "        open(a, 'w').write(text)\n"
        "    args.append(a)\n"
        "os.execvp('g++', ['g++', *args])\n"
    )
    script.chmod(0o755)
    return script


@linux
@pytest.mark.parametrize(
    "edit, reason",
    [("wrong", "gave a wrong softmax in their self-test"), ("crash", "the kernel self-test crashed (SIGSEGV)")],
)
def test_a_library_that_fails_its_self_test_is_not_cached(tmp_path, edit, reason):
    out, stderr = _probe(tmp_path, "build", CXX=str(_wrapper(tmp_path, edit)))
    assert reason in out["build_error"], out
    _assert_fell_back(out)
    assert "mlx-edge doctor --build" in out["problem"]  # nothing was cached: load() finds nothing
    assert _cached_files(tmp_path) == [".build.lock"]  # no library, no sidecar, no temporary file


@linux
def test_a_compiler_that_fails_leaves_the_mlx_expressions_in_place(tmp_path):
    broken = tmp_path / "broken-g++"
    broken.write_text("#!/bin/sh\necho 'fatal error: no can do' >&2\nexit 1\n")
    broken.chmod(0o755)
    out, stderr = _probe(tmp_path, "build", CXX=str(broken))
    assert "could not build" in out["build_error"] and "no can do" in out["build_error"]
    _assert_fell_back(out)
    assert _cached_files(tmp_path) == [".build.lock"]  # no half-written library left


@linux
def test_two_first_builds_at_once_compile_once(tmp_path):
    log = tmp_path / "compiles.log"
    counting = tmp_path / "counting-g++"
    counting.write_text(f'#!/bin/sh\necho "$$" >> {log}\nexec g++ "$@"\n')
    counting.chmod(0o755)
    env = _env(tmp_path, CXX=str(counting))
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE, "build"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert all(run.returncode == 0 for run in runs), [err for _, err in outputs]
    for stdout, _ in outputs:
        out = json.loads(stdout.strip().splitlines()[-1])
        assert out["loaded"] is True and out["build_error"] is None, out
    assert len(log.read_text().splitlines()) == 1  # one compile: the second process waited, then found it
    assert sum(err.count("building its CPU kernels") for _, err in outputs) == 1


@linux
def test_switching_the_kernels_off(tmp_path):
    out, stderr = _probe(tmp_path, MLX_EDGE_CPU_KERNELS="0")
    assert out["loaded"] is False and "MLX_EDGE_CPU_KERNELS=0" in out["problem"]
    assert "CPU kernels off" not in stderr  # asked for: nothing to say


@linux
def test_a_nanobind_that_is_not_mlxs_is_refused_before_building(tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "_nanobind_abi", lambda _dir: "0")
    with pytest.raises(OSError, match="does not match the one mlx"):
        kernels.build()
    assert not (tmp_path / "kernels").exists()
