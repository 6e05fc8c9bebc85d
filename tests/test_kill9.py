"""kill -9 in the middle of each long stage: the re-run finishes cleanly, leaves no stale folder, and
(distill, label) ends bit-identical to a run that was never interrupted.

Each stage runs as a real `python -m mlx_edge` process, SIGKILLed as soon as it has written part of
its work (a checkpoint, a shard, its hidden staging folder): nothing in-process could stand in for
a process that dies without running a single `finally`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a dozen fresh processes, each importing torch and MLX


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mlx_edge", *args]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result


def _kill_when(args: list[str], ready, timeout: float = 300) -> None:
    """Start `args`, SIGKILL it once `ready()` holds. Fails if it finished first (the workload must be
    big enough to be caught mid-way) or never got there."""
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if ready():
                os.kill(process.pid, signal.SIGKILL)
                assert process.wait(timeout=60) == -signal.SIGKILL
                return
            if process.poll() is not None:
                pytest.fail(f"{args[3:5]} exited ({process.returncode}) before it could be killed mid-way")
            time.sleep(0.01)
        pytest.fail(f"{args[3:5]} never reached the point to kill it at")
    finally:
        if process.poll() is None:
            process.kill()


def _hidden(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}"))


def test_teacher_train_killed_restarts_cleanly(base_dir, toy_data, tmp_path):
    train, dev = toy_data
    args = _cli("teacher", "train", "--model", str(base_dir), "--train", str(train), "--dev", str(dev),
                "--out", str(tmp_path / "t"), "--epochs", "30", "--learning-rate", "1e-3", "--quiet")  # fmt: skip
    _kill_when(args, lambda: any(_hidden(tmp_path, "t")))
    assert not (tmp_path / "t").exists() and _hidden(tmp_path, "t"), "the killed run left its staging folder"
    _run(args[:-5] + ["--epochs", "1", "--min-steps", "0", "--learning-rate", "1e-3", "--quiet"])
    assert (tmp_path / "t" / "model.safetensors").is_file()
    assert _hidden(tmp_path, "t") == [], "the re-run cleaned what the killed one left"


def test_label_killed_resumes_bit_identical(trained_teacher, toy_data, tmp_path):
    def args(out):
        return _cli("teacher", "label", "--teacher", str(trained_teacher), "--data", str(toy_data[0]), "--out",
                    str(out), "--backend", "mlx", "--hidden-layers", "0,1,2", "--attention-layers", "1,2",
                    "--shard-size", "8", "--batch-size", "8", "--quiet")  # fmt: skip

    _run(args(tmp_path / "whole"))
    _kill_when(args(tmp_path / "cut"), lambda: (tmp_path / "cut" / "shard-00002.safetensors").exists())
    assert len(list((tmp_path / "cut").glob("shard-*"))) < len(list((tmp_path / "whole").glob("shard-*")))
    _run(args(tmp_path / "cut"))
    whole = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert sorted(p.name for p in (tmp_path / "cut").iterdir()) == whole
    for name in whole:
        if name.endswith(".safetensors"):
            assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_distill_killed_resumes_bit_identical(trained_teacher, toy_data, tmp_path):
    def args(out):
        return _cli("distill", "--teacher", str(trained_teacher), "--train", str(toy_data[0]), "--dev",
                    str(toy_data[1]), "--student", "half", "--init", "teacher", "--epochs", "6", "--learning-rate", "1e-3",
                    "--checkpoint-every", "5", "--out", str(out), "--quiet")  # fmt: skip

    _run(args(tmp_path / "whole"))
    _kill_when(args(tmp_path / "cut"), lambda: (tmp_path / ".cut.work" / "ckpt").is_dir())
    _run(args(tmp_path / "cut"))
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert _hidden(tmp_path, "cut") == []


def test_export_killed_restarts_cleanly(trained_teacher, tmp_path):
    args = _cli("export", str(trained_teacher), "--out", str(tmp_path / "b"), "--precision", "fp32")
    _kill_when(args, lambda: any(_hidden(tmp_path, "b")))
    assert not (tmp_path / "b").exists()
    _run(args)
    assert (tmp_path / "b" / "manifest.json").is_file()
    assert _hidden(tmp_path, "b") == [], "the re-run cleaned what the killed one left"
    _run(_cli("check", str(tmp_path / "b")))
