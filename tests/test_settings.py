"""One default per setting: the library functions, the CLI options and `mlx-edge run` configs all take
them from mlx_edge/settings.py. These tests fail when a default is written anywhere with another value."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import replace

import click
import pytest

from mlx_edge import settings
from mlx_edge.augment.api import augment
from mlx_edge.bench.run import bench
from mlx_edge.cli import main
from mlx_edge.distill.api import distill
from mlx_edge.distill.loop import LoopConfig
from mlx_edge.errors import ConfigError
from mlx_edge.export import export_bundle
from mlx_edge.pipeline import SECTIONS, STAGE_SETTINGS, PipelineConfig, stage_settings
from mlx_edge.teacher.label import label_targets
from mlx_edge.teacher.train import train_teacher

# (settings instance, library function, CLI command path); a CLI option's name is its field's (tests/test_names.py)
STAGES = [
    (settings.TEACHER, train_teacher, ("teacher", "train")),
    (settings.LABEL, label_targets, ("teacher", "label")),
    (settings.DISTILL, distill, ("distill",)),
    (settings.EXPORT, export_bundle, ("export",)),
    (settings.AUGMENT, augment, ("augment",)),
    (settings.BENCH, bench, ("bench",)),
]


def _command(path: tuple[str, ...]) -> click.Command:
    command = main
    for name in path:
        command = command.commands[name]
    return command


def _cli_default(option: click.Option):
    """The value the command body sees when the option is not given."""
    value = option.default
    if option.is_flag and not isinstance(value, bool) and not option.secondary_opts:
        value = False  # click leaves a plain flag's default unset: off (an --x/--no-x pair passes None)
    if option.callback is not None and isinstance(value, str):
        value = option.callback(None, option, value)
    return value  # a click.Choice's value is text: _same compares it as text


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return tuple(a) == tuple(b)
    if isinstance(a, str) != isinstance(b, str) and a is not None and b is not None:
        return str(a) == str(b)  # a click.Choice of "6"/"8" for an int setting
    return a == b


@pytest.mark.parametrize("defaults, function, path", STAGES, ids=[s[2][-1] for s in STAGES])
def test_library_and_cli_defaults_are_the_settings(defaults, function, path):
    fields = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)}
    parameters = inspect.signature(function).parameters
    library = {name: p.default for name, p in parameters.items() if name in fields}
    cli = {}
    for param in _command(path).params:
        if isinstance(param, click.Option) and param.name in fields:
            cli[param.name] = _cli_default(param)
    assert library, f"{function.__name__} takes none of the settings"
    differ = {k: (v, fields[k]) for k, v in library.items() if not _same(v, fields[k])}
    assert differ == {}, f"library defaults differ from settings: {differ}"
    differ = {k: (v, fields[k]) for k, v in cli.items() if not _same(v, fields[k])}
    assert differ == {}, f"CLI defaults differ from settings: {differ}"
    # every setting reaches the user somewhere: an option, or a parameter of the library function
    unused = set(fields) - set(cli) - set(library) - {"max_length", "epochs", "batch_size", "learning_rate"}
    if function is not distill:  # distill's loop settings arrive through LoopConfig (checked below)
        assert unused == set()


def test_loop_config_defaults_are_the_distill_settings():
    loop, ds = LoopConfig(), settings.DISTILL
    # but min_steps: a library caller's LoopConfig runs its epochs exactly; the CLI and pipeline's has the
    # floor. Neither has a step budget unless given one (the pipeline gives its teacher edits one)
    assert loop.min_steps == 0 and ds.min_steps > 0 and loop.step_budget == 0 and ds.step_budget is None
    assert LoopConfig.from_settings(ds) == replace(loop, min_steps=ds.min_steps)
    assert LoopConfig.from_settings(replace(ds, step_budget=700)).step_budget == 700
    assert (loop.epochs, loop.batch_size, loop.temperature) == (ds.epochs, ds.batch_size, ds.temperature)
    # unset, the rate is the library's; the pipeline lowers it for teacher edits (test_teacher_edits.py)
    assert ds.learning_rate is None and loop.learning_rate == settings.DISTILL_LEARNING_RATE
    assert {k: s.start for k, s in loop.weights.items()} == {
        "kd": float(ds.kd_weight),
        "ce": float(ds.ce_weight),
        "hidden": float(ds.hidden_weight),
        "attention": float(ds.attention_weight),
        "embedding": float(ds.embedding_weight),
    }


def test_an_empty_config_section_gives_the_settings_defaults(tmp_path):
    config = PipelineConfig(out=tmp_path, train=tmp_path / "t.jsonl", seed=7, device="cpu")
    for name, cls in STAGE_SETTINGS.items():
        got = stage_settings(config, name)
        expected = cls(out=str(tmp_path)) if name == "pipeline" else cls()
        shared = {k: v for k, v in (("seed", 7), ("device", "cpu")) if hasattr(expected, k)}
        assert got == dataclasses.replace(expected, **shared), name


def test_config_keys_are_the_settings_fields_and_typos_are_refused(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"text": "a", "label": "x"}\n')
    good = tmp_path / "good.toml"
    good.write_text('[data]\ntrain = "t.jsonl"\n[teacher]\nmodel = "m"\nepochs = 2\n[distill]\nkd_weight = 1\n')
    config = PipelineConfig.from_toml(good)
    assert stage_settings(config, "teacher").epochs == 2
    assert stage_settings(config, "distill").kd_weight == "1"  # a number written for a schedule string is kept
    bad = tmp_path / "bad.toml"
    bad.write_text('[data]\ntrain = "t.jsonl"\n[export]\nprecison = "fp32"\n')
    with pytest.raises(ConfigError, match="did you mean 'precision'"):
        PipelineConfig.from_toml(bad)
    wrong_type = tmp_path / "type.toml"
    wrong_type.write_text('[data]\ntrain = "t.jsonl"\n[label]\nbatch_size = "many"\n')
    with pytest.raises(ConfigError, match="batch_size"):
        PipelineConfig.from_toml(wrong_type)
    assert set(SECTIONS) >= set(STAGE_SETTINGS)


def test_the_docs_list_every_exit_code():
    from pathlib import Path

    from mlx_edge.errors import EXIT_CODES

    page = (Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    for code, meaning in EXIT_CODES.items():
        assert f"| {code} | {meaning} |" in page, f"docs/troubleshooting.md's exit code table lacks {code}"
