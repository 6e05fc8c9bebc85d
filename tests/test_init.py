"""`mlx-edge init`: the config it writes parses to the defaults, its paths hold from any directory, its
mistakes are one line, every setting has a comment, and examples/pipeline.toml is its text. The
pipeline itself does not run here."""

from __future__ import annotations

import dataclasses
import re
import runpy
from pathlib import Path

from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.config_file import COMMENTS, EXAMPLES, LAYOUT, OPTIONAL, write_config
from mlx_edge.pipeline import SECTIONS, STAGE_SETTINGS, PipelineConfig, stage_settings
from mlx_edge.settings import DEMO_TEACHER, PIPELINE
from tests.helpers.cli import assert_one_line_error

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "write_example_config.py"


def data_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"text": "buy milk", "label": "shopping"}\n', encoding="utf-8")
    return path


def init(*args: str):
    return CliRunner().invoke(main, ["init", *map(str, args)])


def assert_defaults(config: PipelineConfig) -> None:
    for name, cls in STAGE_SETTINGS.items():
        if name != "pipeline":
            assert stage_settings(config, name) == cls(), name
    assert (config.device, config.seed, config.bundles) == (PIPELINE.device, PIPELINE.seed, PIPELINE.bundles)
    assert config.teacher["model"] == DEMO_TEACHER and "dir" not in config.teacher
    assert config.augment == {} and config.check == {"enabled": True}
    assert (config.text_column, config.label_column) == (None, None)


def test_init_writes_a_config_with_every_default(tmp_path):
    train, dev = data_file(tmp_path / "train.jsonl"), data_file(tmp_path / "dev.jsonl")
    result = init(tmp_path / "my.toml", "--train", train, "--dev", dev)
    assert result.exit_code == 0, result.output
    assert f"mlx-edge run {tmp_path / 'my.toml'}" in result.output
    config = PipelineConfig.from_toml(tmp_path / "my.toml")
    assert_defaults(config)
    assert (config.train, config.dev, config.test) == (train, dev, None)
    assert config.out == tmp_path / "mlx-edge-run"


def test_paths_hold_from_another_directory(tmp_path, monkeypatch):
    train = data_file(tmp_path / "data" / "train.jsonl")
    test = data_file(tmp_path / "data" / "test.jsonl")
    monkeypatch.chdir(tmp_path)
    result = init("configs/run.toml", "--train", "data/train.jsonl", "--test", "data/test.jsonl")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "configs" / "run.toml").read_text(encoding="utf-8")
    assert 'train = "../data/train.jsonl"' in text and str(tmp_path) not in text
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = PipelineConfig.from_toml(Path("../configs/run.toml"))
    assert config.train.resolve() == train.resolve() and config.train.is_file()
    assert config.test.resolve() == test.resolve()
    assert config.out.resolve() == (tmp_path / "configs" / "mlx-edge-run").resolve()


def test_a_missing_data_file_is_one_line_and_writes_nothing(tmp_path):
    result = init(tmp_path / "my.toml", "--train", tmp_path / "nope.csv")
    assert_one_line_error(result, "--train", "nope.csv")
    result = init(tmp_path / "my.toml", "--train", data_file(tmp_path / "train.csv"), "--dev", tmp_path / "no-dev.csv")
    assert_one_line_error(result, "--dev")
    assert not (tmp_path / "my.toml").exists()


def test_an_existing_config_needs_force(tmp_path):
    train = data_file(tmp_path / "train.csv")
    (tmp_path / "my.toml").write_text("mine\n", encoding="utf-8")
    assert_one_line_error(init(tmp_path / "my.toml", "--train", train), "exists", "--force")
    assert (tmp_path / "my.toml").read_text(encoding="utf-8") == "mine\n"
    assert init(tmp_path / "my.toml", "--train", train, "--force").exit_code == 0
    assert_defaults(PipelineConfig.from_toml(tmp_path / "my.toml"))


def test_the_example_config_is_what_init_writes():
    expected = runpy.run_path(str(SCRIPT))["example_text"]()
    actual = (ROOT / "examples" / "pipeline.toml").read_text(encoding="utf-8")
    assert actual == expected, "examples/pipeline.toml is stale: run .venv/bin/python scripts/write_example_config.py"
    assert '"../mlx_edge/datasets/todo/train.jsonl"' in actual
    assert_defaults(PipelineConfig.from_toml(ROOT / "examples" / "pipeline.toml"))


def test_every_setting_has_a_comment():
    for section, (cls, extras) in LAYOUT.items():
        keys = set(extras) | {f.name for f in dataclasses.fields(cls)} if cls else set(extras)
        missing, stale = sorted(keys - set(COMMENTS[section])), sorted(set(COMMENTS[section]) - keys)
        assert not missing, f"[{section}] settings without a comment in mlx_edge/config_file.py COMMENTS: {missing}"
        assert not stale, f"[{section}] COMMENTS name no setting (renamed or removed?): {stale}"
    assert set(COMMENTS) == set(LAYOUT)


def test_the_layout_is_the_pipelines():
    assert list(LAYOUT) == list(SECTIONS)
    assert {name: set(extras) for name, (_, extras) in LAYOUT.items()} == SECTIONS
    assert {name: cls for name, (cls, _) in LAYOUT.items() if cls} == STAGE_SETTINGS


def test_every_commented_line_parses_once_uncommented(tmp_path):
    """The optional section and each unset setting's example are valid settings, not placeholders."""
    text = write_config(train=data_file(tmp_path / "train.csv"), config_path=tmp_path / "my.toml")
    assert " = ...\n" not in text and " = ... " not in text, "an unset setting without an EXAMPLES value"
    lines = [re.sub(r"^(# )+(?=\[\w+\]|\w+ = )", "", line) for line in text.splitlines()]
    (tmp_path / "all.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = PipelineConfig.from_toml(tmp_path / "all.toml")
    for name in STAGE_SETTINGS:
        if name != "pipeline":
            stage_settings(config, name)  # types and ranges
    assert config.augment["per_class"] > 0 and set(OPTIONAL) <= set(SECTIONS)
    assert set(EXAMPLES) <= set(LAYOUT)
