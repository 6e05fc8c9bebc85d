"""`mlx-edge augment adapt` (LoRA on the augment LLM, by mlx-lm's own trainer) and `augment --adapter`,
on a tiny random qwen2 built here (tests/helpers/llm.py). Nothing is mocked: real mlx-lm training,
real adapter loading, real generation."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import random
import shutil
from pathlib import Path

import click
import mlx.core as mx
import pytest
from click.testing import CliRunner

from mlx_edge.augment.adapt import adapt
from mlx_edge.augment.adapt_data import Pair, build_pairs, fit
from mlx_edge.cli import main
from mlx_edge.errors import ConfigError, DataError, DataWarning
from mlx_edge.settings import ADAPT
from tests.helpers.cli import assert_one_line_error
from tests.helpers.llm import build_tiny_llm
from tests.helpers.tiny import write_jsonl

# Two classes, each a handful of near-identical sentences: a LoRA must learn them within a few dozen steps.
ROWS = [{"text": f"pay the credit card bill {d}", "label": "finance"} for d in "0123"] + [
    {"text": f"run in the park at {d}", "label": "health"} for d in "0123"
]
STEP_KEYS = {"step", "total_steps", "loss", "tokens_per_second", "peak_memory_gb", "learning_rate"}


def cli(*args):
    return CliRunner().invoke(main, [*map(str, args)])


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory) -> Path:
    return build_tiny_llm(tmp_path_factory.mktemp("llm") / "tiny-qwen2")


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "labeled.jsonl", ROWS)


@pytest.fixture(scope="module")
def adapted(tiny_llm, rows_file, tmp_path_factory):
    """One real adapt run (library), its on_step calls recorded."""
    steps: list[dict] = []
    out = tmp_path_factory.mktemp("adapt") / "adapter"
    result = adapt(
        model=tiny_llm, data=rows_file, out=out, epochs=12, learning_rate=1e-2, on_step=steps.append, progress=False
    )
    return result, steps, out


def test_adapt_writes_an_mlx_lm_adapter_and_its_loss_falls(adapted, tiny_llm):
    result, steps, out = adapted
    assert sorted(p.name for p in out.iterdir()) == ["adapt_report.json", "adapter_config.json", "adapters.safetensors"]
    assert not list(out.parent.glob(".adapter.*"))  # no staging folder left beside it
    weights = mx.load(str(out / "adapters.safetensors"))
    assert weights and all(k.endswith(("lora_a", "lora_b")) for k in weights)
    assert any(float(mx.abs(v).max()) > 0 for k, v in weights.items() if k.endswith("lora_b"))  # B starts at 0
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["fine_tune_type"] == "lora" and config["lora_parameters"]["rank"] == 8
    assert config["mlx_edge"]["base"]["llm"] == str(tiny_llm)
    # 8 rows, 2 classes of 4: each pair answers with 2 rows and shows the other 2 -> 4 pairs an epoch
    assert result.pairs == 12 * 4 and result.steps == 12 * 4 // 2 == len(steps)
    assert [s["step"] for s in steps] == list(range(1, result.steps + 1))
    assert all(set(s) == STEP_KEYS and s["total_steps"] == result.steps for s in steps)
    report = json.loads((out / "adapt_report.json").read_text())
    losses = [loss for _, loss in report["losses"]]
    assert len(losses) == result.steps and losses == [s["loss"] for s in steps]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.5, (first, last)
    assert report["tokens_per_second"] > 0 and report["peak_memory_gb"] > 0 and report["examples"] == 8
    assert report["base"]["weights_sha256"] and report["data"]["sha256"]


def test_the_adapter_changes_the_model_toward_the_data(adapted, tiny_llm):
    """mlx_lm.load with adapter_path (mlx-lm's own loader) gives other logits, and the training answers'
    loss under the adapted model is below the base model's."""
    from mlx_lm import load
    from mlx_lm.tuner.datasets import CompletionsDataset
    from mlx_lm.tuner.trainer import default_loss

    _, _, out = adapted
    base, tokenizer = load(str(tiny_llm))
    tuned, _ = load(str(tiny_llm), adapter_path=str(out))
    pair = Pair(
        "finance", ("pay the credit card bill 0", "pay the credit card bill 1"), ("pay the credit card bill 2",)
    )
    tokens, offset = CompletionsDataset([], tokenizer, "prompt", "completion", True).process(pair.render())
    batch, lengths = mx.array([tokens]), mx.array([[offset, len(tokens)]])
    assert float(mx.abs(base(batch) - tuned(batch)).max()) > 1e-2
    base_loss, _ = default_loss(base, batch, lengths)
    tuned_loss, _ = default_loss(tuned, batch, lengths)
    assert float(tuned_loss) < float(base_loss) - 0.5, (float(base_loss), float(tuned_loss))


def test_augment_with_the_adapter_records_it_and_a_new_adapter_is_another_setup(adapted, tiny_llm, rows_file, tmp_path):
    _, _, adapter = adapted
    out = tmp_path / "syn.jsonl"
    args = ["augment", "--seeds", rows_file, "--llm", tiny_llm, "--adapter", adapter, "--per-class", 1]
    args += ["--max-rounds", 1, "--batch-size", 1, "--max-tokens", 12, "--min-chars", 1, "--out", out]
    result = cli(*args, "--json", "--quiet")
    assert result.exit_code == 0, result.output
    sha = hashlib.sha256((adapter / "adapters.safetensors").read_bytes()).hexdigest()
    assert json.loads(result.output)["adapter"] == {"path": str(adapter.resolve()), "sha256": sha}
    manifest = json.loads(out.with_name("syn.jsonl.manifest.json").read_text())
    assert manifest["setup"]["adapter"] == {"path": str(adapter.resolve()), "sha256": sha}
    assert manifest["generator"]["answers"] == 1  # the adapted model wrote the answer
    # other adapter weights at another path: the saved run is another setup
    other = tmp_path / "other-adapter"
    shutil.copytree(adapter, other)
    weights = mx.load(str(other / "adapters.safetensors"))
    mx.save_safetensors(str(other / "adapters.safetensors"), {k: v * 2 for k, v in weights.items()})
    again = cli(*[other if a == adapter else a for a in args], "--quiet")
    assert_one_line_error(again, "differs in: adapter")
    assert again.exit_code == 15


def test_adapter_mistakes_are_one_line_before_anything_is_written(adapted, tiny_llm, rows_file, tmp_path):
    _, _, adapter = adapted
    out = tmp_path / "syn.jsonl"

    def run(llm, adapter_dir):
        extra = ["--llm", llm] if llm else []
        return cli("augment", "--seeds", rows_file, *extra, "--adapter", adapter_dir, "--per-class", 1, "--out", out)

    (tmp_path / "empty").mkdir()
    assert_one_line_error(run(tiny_llm, tmp_path / "empty"), "is not a LoRA adapter directory", "adapters.safetensors")
    assert_one_line_error(run(tiny_llm, tmp_path / "nowhere"), "does not exist")
    # the same architecture and config with other weights: shapes agree, so only the recorded base tells
    twin = tmp_path / "twin"
    shutil.copytree(tiny_llm, twin)
    weights = mx.load(str(twin / "model.safetensors"))
    mx.save_safetensors(str(twin / "model.safetensors"), {k: v + 0.01 for k, v in weights.items()})
    result = run(twin, adapter)
    assert_one_line_error(result, "trained on another base model", f"pass --llm {tiny_llm}")
    assert result.exit_code == 4
    assert run(None, adapter).exit_code == 12 and "--adapter needs --llm" in run(None, adapter).output
    assert not out.exists()


def test_adapt_cli_json_and_out_guards(tiny_llm, rows_file, tmp_path):
    out = tmp_path / "adapter"
    args = ["augment", "adapt", "--model", tiny_llm, "--data", rows_file, "--out", out, "--epochs", 1, "--quiet"]
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)  # nothing but the report on stdout (mlx-lm's own table is kept off it)
    assert report["steps"] == 2 and report["out"] == str(out)
    stamp = (out / "adapters.safetensors").stat().st_mtime_ns
    again = cli(*args)
    assert_one_line_error(again, "already exists", "--force")
    assert again.exit_code == 18 and (out / "adapters.safetensors").stat().st_mtime_ns == stamp
    forced = cli(*args, "--force", "--seed", 1)
    assert forced.exit_code == 0, forced.output
    assert "training loss" in forced.output and f"--adapter {out}" in forced.output
    assert json.loads((out / "adapter_config.json").read_text())["seed"] == 1
    # --out over an input is refused even with --force, and the input stays
    before = rows_file.read_bytes()
    over = cli("augment", "adapt", "--model", tiny_llm, "--data", rows_file, "--out", rows_file, "--force")
    assert_one_line_error(over, "is the input")
    assert rows_file.read_bytes() == before
    inside = cli("augment", "adapt", "--model", tiny_llm, "--data", rows_file, "--out", tiny_llm / "a", "--force")
    assert_one_line_error(inside, "inside the input directory")


def test_adapt_input_mistakes_are_one_line(tiny_llm, rows_file, tmp_path):
    def run(*extra, data=rows_file, model=tiny_llm):
        return cli("augment", "adapt", "--model", model, "--data", data, "--out", tmp_path / "a", *extra)

    assert run("--rank", 0).exit_code == 2 and "'--rank'" in run("--rank", 0).output
    assert run("--epochs", 0).exit_code == 2
    assert run("--learning-rate", "nan").exit_code == 2
    with pytest.raises(ConfigError, match="rank = 0 is out of range"):
        adapt(model=tiny_llm, data=rows_file, out=tmp_path / "a", rank=0)
    with pytest.raises(ConfigError, match="num_layers = 0"):
        adapt(model=tiny_llm, data=rows_file, out=tmp_path / "a", num_layers=0)
    assert run(model=tmp_path / "no-model").exit_code == 4
    (tmp_path / "empty.jsonl").write_text("")
    assert_one_line_error(run(data=tmp_path / "empty.jsonl"), "is empty")
    one_each = write_jsonl(tmp_path / "one.jsonl", [ROWS[0], ROWS[4]])
    result = run(data=one_each)
    assert_one_line_error(result, "too few rows", "at least two per class")
    assert result.exit_code == 3
    assert_one_line_error(run("--batch-size", 64), "too few rows")
    lonely = write_jsonl(tmp_path / "lonely.jsonl", [*ROWS[:4], ROWS[4]])
    with pytest.warns(DataWarning, match="class 'health' has a single example"):
        with pytest.raises(DataError, match="too few rows"):
            adapt(model=tiny_llm, data=lonely, out=tmp_path / "a", batch_size=64)
    assert not (tmp_path / "a").exists()


def test_a_loss_that_goes_bad_stops_the_run_and_writes_nothing(tiny_llm, rows_file, tmp_path):
    result = cli(
        "augment", "adapt", "--model", tiny_llm, "--data", rows_file, "--out", tmp_path / "a", "--learning-rate", 1e30
    )
    assert_one_line_error(result, "the loss went bad", "lower --learning-rate")
    assert result.exit_code == 20
    assert list(tmp_path.iterdir()) == []  # no adapter, no staging folder


def test_pairs_are_augments_request_answered_with_each_row_once():
    rows = {"finance": [f"pay bill {i}" for i in range(7)], "health": ["run", "walk"], "lonely": ["alone"]}
    pairs = build_pairs(rows, rows, shots=3, lines=10, rng=random.Random(0))
    for label, texts in rows.items():
        answered = [t for p in pairs if p.label == label for t in p.answer]
        assert sorted(answered) == (sorted(texts) if label != "lonely" else [])  # a single row cannot be shown
    for pair in pairs:
        assert not set(pair.shots) & set(pair.answer) and set(pair.shots) <= set(rows[pair.label])
        record = pair.render()
        assert f'The class is "{pair.label}"' in record["prompt"]
        assert f"Write {len(pair.answer)} new examples" in record["prompt"]
        assert all(f"- {s}" in record["prompt"] for s in pair.shots)
        assert record["completion"].split("\n") == list(pair.answer)
    assert max(len(p.answer) for p in pairs if p.label == "finance") == 3  # at most half, the rest to show
    # validation: answers from held-out rows, shots from training rows only
    held = build_pairs({"finance": ["owe rent"]}, rows, shots=3, lines=10, rng=random.Random(0))
    assert held[0].answer == ("owe rent",) and set(held[0].shots) <= set(rows["finance"])


def test_fit_shrinks_long_pairs_instead_of_cutting_their_answers():
    """Characters stand in for tokens: the pair is 535 long, 482 with one shot, 451 with one answer line."""
    pair = Pair("finance", ("a" * 50, "b" * 50), ("x" * 30, "y" * 30))

    def length(p):
        return len(p.render()["prompt"]) + len(p.render()["completion"])

    assert fit([pair], length, 535) == ([pair], 0)
    kept, dropped = fit([pair], length, 500)  # one shot fewer is enough
    assert dropped == 0 and kept == [Pair("finance", ("a" * 50,), pair.answer)]
    kept, dropped = fit([pair], length, 460)  # then the answer is split, no row lost
    assert dropped == 0 and sorted(p.answer for p in kept) == [("x" * 30,), ("y" * 30,)]
    assert fit([pair], length, 400) == ([], 2)


def test_help_and_defaults():
    top = cli("augment", "--help")
    assert top.exit_code == 0 and "mlx-edge augment adapt" in top.output
    sub = cli("augment", "adapt", "--help")
    assert sub.exit_code == 0 and " augment adapt [OPTIONS]" in sub.output.splitlines()[0]
    # one default per setting: library, CLI and settings.ADAPT agree
    fields = {f.name: getattr(ADAPT, f.name) for f in dataclasses.fields(ADAPT)}
    library = {n: p.default for n, p in inspect.signature(adapt).parameters.items() if n in fields}
    from mlx_edge.cli.augment_adapt import adapt as command

    options = {p.name: p.default for p in command.params if isinstance(p, click.Option) and p.name in fields}
    assert library == fields and options == fields


def test_a_run_configs_augment_section_takes_an_adapter(tmp_path, rows_file):
    from mlx_edge.pipeline import PipelineConfig

    (tmp_path / "adapter").mkdir()

    def config(*augment_lines):
        path = tmp_path / "c.toml"
        lines = ["[data]", f'train = "{rows_file}"', f'dev = "{rows_file}"', "[teacher]", 'dir = "t"', "[augment]"]
        path.write_text("\n".join([*lines, "per_class = 5", *augment_lines]) + "\n")
        return path

    loaded = PipelineConfig.from_toml(config('llm = "smollm2-135m-instruct"', 'adapter = "adapter"'))
    assert loaded.augment["adapter"] == str(tmp_path / "adapter")  # relative to the config, as llm is
    for lines in (["adapter = 3", 'llm = "x"'], ['adapter = "adapter"']):
        result = cli("run", config(*lines))
        assert_one_line_error(result, "[augment] adapter needs llm too")
        assert result.exit_code == 12 and not (tmp_path / "mlx-edge-run").exists()
