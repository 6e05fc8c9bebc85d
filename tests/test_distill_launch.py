"""`mlx-edge distill` data parallel under `mlx.launch`: 2 local processes (MLX's ring backend over TCP)
give the student one process gives at the same global batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from safetensors.numpy import load_file

from mlx_edge.distill.config import TERMS
from mlx_edge.distill.step import rank_rows, term_shares

LAUNCH = Path(sys.executable).with_name("mlx.launch")
TOLERANCE = 1e-5  # weights after 2 epochs: the ranks' gradients are averaged in another order than one sum

needs_launch = pytest.mark.skipif(
    not os.environ.get("CI") and not (LAUNCH.exists() and mx.distributed.is_available()),
    reason="mlx.launch or MLX's distributed backends are missing from this environment",
)


@pytest.mark.parametrize("rows,world", [(16, 2), (7, 2), (5, 3), (1, 2), (9, 4)])
def test_rank_rows_split_a_batch_into_parts_that_add_up_to_it(rows, world):
    rng = np.random.default_rng(rows)
    mask = (np.arange(12)[None, :] < rng.integers(2, 12, size=(rows, 1))).astype(np.int32)
    labels = np.where(rng.random(rows) < 0.5, -1, 1)  # unlabeled rows: no cross-entropy
    labels[0] = 1
    parts = [rank_rows(mask, labels, r, world, "mse") for r in range(world)]
    covered = [i for mine, scale in parts if scale.any() for i in range(rows)[mine]]
    assert covered == list(range(rows))  # every row once, in order
    total = sum(scale for _, scale in parts) / world  # the ranks' average is the whole batch
    np.testing.assert_allclose(total, np.ones(len(TERMS)), rtol=1e-6)
    whole = term_shares(mask, [0, rows], "mse", labels >= 0)[0]
    np.testing.assert_allclose(whole, np.ones(len(TERMS)), rtol=1e-6)
    if rows < world:  # a rank the batch does not reach computes a row at scale 0
        assert not parts[-1][1].any() and parts[-1][0] == slice(0, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _distill(args: list[str], out: Path, *, processes: int = 1) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mlx_edge", "distill", *args, "--out", str(out)]
    if processes > 1:
        launch = [str(LAUNCH), "-n", str(processes), "--backend", "ring", "--starting-port", str(_free_port())]
        command = [*launch, "--", *command]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


@needs_launch
def test_two_processes_distill_the_student_one_process_does(trained_teacher, toy_data, tmp_path):
    config = json.loads((trained_teacher / "config.json").read_text())
    # no dropout: then one process and two compute the same step, and only the summation order differs
    config.update(num_hidden_layers=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (tmp_path / "student.json").write_text(json.dumps(config))
    train, dev = toy_data
    args = ["--teacher", str(trained_teacher), "--train", str(train), "--dev", str(dev)]
    args += [
        "--student",
        str(tmp_path / "student.json"),
        "--epochs",
        "2",
        "--min-steps",
        "0",
        "--learning-rate",
        "1e-3",
    ]
    args += ["--quiet"]  # --min-steps 0: exactly the 2 epochs TOLERANCE is stated for

    one = _distill([*args, "--batch-size", "16"], tmp_path / "one")
    assert one.returncode == 0, one.stderr
    two = _distill([*args, "--batch-size", "16"], tmp_path / "two", processes=2)
    assert two.returncode == 0, two.stdout + two.stderr
    assert two.stdout.count("student written to") == 1  # rank 0 reports; rank 1 prints nothing
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no work directory left

    a, b = load_file(tmp_path / "one" / "model.safetensors"), load_file(tmp_path / "two" / "model.safetensors")
    assert a.keys() == b.keys()
    assert max(float(np.abs(a[k] - b[k]).max()) for k in a) <= TOLERANCE
    metrics = [[json.loads(line) for line in open(d / "metrics.jsonl")] for d in (tmp_path / "one", tmp_path / "two")]
    assert [m["step"] for m in metrics[0]] == [m["step"] for m in metrics[1]]
    for m1, m2 in zip(*metrics):
        assert m1["dev_accuracy"] == m2["dev_accuracy"]
        for term in TERMS:
            assert abs(m1[f"train_{term}"] - m2[f"train_{term}"]) <= 1e-5

    # the tolerance is tight enough to see another global batch: one process at batch 8 lands elsewhere
    other = _distill([*args, "--batch-size", "8"], tmp_path / "other")
    assert other.returncode == 0, other.stderr
    c = load_file(tmp_path / "other" / "model.safetensors")
    assert max(float(np.abs(a[k] - c[k]).max()) for k in a) > 100 * TOLERANCE


@needs_launch
def test_the_pipeline_refuses_to_run_under_mlx_launch(toy_data, tmp_path):
    train, _ = toy_data
    config = tmp_path / "run.toml"
    config.write_text(f'[pipeline]\nout = "{tmp_path / "work"}"\n\n[data]\ntrain = "{train}"\n')
    command = [str(LAUNCH), "-n", "2", "--backend", "ring", "--starting-port", str(_free_port()), "--"]
    command += [sys.executable, "-m", "mlx_edge", "run", str(config)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, "CI": "1"})
    output = result.stdout + result.stderr
    # mlx.launch itself exits 0 here; the ranks' own exit codes are in its warnings
    assert "the pipeline runs in one process" in output and "exited with code 12" in output
    assert not (tmp_path / "work").exists()  # refused before any stage
