"""One name per setting (issue 30): a command's options are its settings class's fields and back, under the
same names (an option's long flag with dashes as underscores is its field, its value's name and the library's
keyword argument), besides the options listed below that are not settings. A renamed option keeps its old
spelling for one release as a hidden alias of a current option, which prints a note; a renamed config key
gets one line that names the new key. The checkers are shown to fail on commands with an option removed,
added or misnamed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import pytest
from click.core import ParameterSource
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.cli.options import OldName, renamed
from mlx_edge.errors import ConfigError
from mlx_edge.pipeline import SECTIONS, PipelineConfig
from mlx_edge.settings import (
    AdaptSettings,
    AugmentSettings,
    BenchSettings,
    DistillSettings,
    ExportSettings,
    LabelSettings,
    TeacherTrainSettings,
)
from tests.helpers.cli import assert_one_line_error

COMMANDS = {
    ("teacher", "train"): TeacherTrainSettings,
    ("teacher", "label"): LabelSettings,
    ("distill",): DistillSettings,
    ("export",): ExportSettings,
    ("augment",): AugmentSettings,
    ("augment", "adapt"): AdaptSettings,
    ("bench",): BenchSettings,
}
# `check` has no settings of its own: its options are export's (the same texts, the same device).
CHECK_SHARES = ExportSettings

RUN = {"force", "quiet"}  # what this run does with its output, never a setting of the stage
COLUMNS = {"text_column", "label_column"}  # how to read the files ([data] in a config)
UNLABELED = {"unlabeled_paths", "unlabeled_column"}  # the transfer set's files and how to read them
# Options that are not settings, by their value's name (click's param.name), per command.
CLI_ONLY = {
    ("teacher", "train"): {
        "model",  # the base model to fine-tune: [teacher] model in a config, beside the settings
        "train_path",  # files
        "dev_path",
        "out",
        *COLUMNS,
        *UNLABELED,  # the files self-training reads: [data] unlabeled in a config
        *RUN,
    },
    ("teacher", "label"): {
        "teacher_dir",  # files
        "data_paths",
        "out",
        "hidden_layers",  # which of the teacher's states the cache keeps: what distill will ask of it
        "attention_layers",
        *COLUMNS,
        *UNLABELED,
        *RUN,
    },
    ("distill",): {
        "teacher_dir",  # files
        "train_path",
        "dev_path",
        "targets_dir",
        "out",
        "static_dim",  # --student static's own (distill/static_settings.py), not a transformer student's
        "init_layers",  # which teacher layers to copy: a choice for one teacher, tried by hand
        *COLUMNS,
        *UNLABELED,
        *RUN,
        "restart",  # discard an interrupted run: this run's decision
        "as_json",  # how the report is printed
    },
    ("export",): {
        "out_dir",  # files (the student is an argument)
        "allow_failed_checks",  # keep a bundle that failed a check: a decision, never a config's default
        *RUN,
        "as_json",
    },
    ("augment",): {
        "seeds",  # files
        "out",
        "teacher_dir",
        "per_class",  # [augment] keys beside the settings in a config (pipeline.SECTIONS)
        "llm",
        "adapter",
        "classes",  # which classes of this data to grow: a choice about the data, not the method
        *COLUMNS,
        *RUN,
        "as_json",
    },
    ("augment", "adapt"): {
        "model",  # the LLM to adapt (augment's --llm)
        "data",  # files
        "out",
        *COLUMNS,
        *RUN,
        "as_json",
    },
    ("bench",): {
        "teacher",  # a model directory
        "backends",  # what to measure, not how: bench() takes them, BenchSettings has no field for them
        "workloads",
        "pipeline_limit",  # the pipeline workload's data and bundles: the demo's, not bench settings
        "pipeline_bundles",
        "json_path",  # where the report goes
        "plot_path",
        "quiet",
    },
}
CHECK_ONLY = {"student_dir", "as_json"}  # `check`: a path, and how the report is printed
# Fields with no option (a config key only), per command: none today, every field has its option.
CONFIG_ONLY: dict[tuple[str, ...], set[str]] = {path: set() for path in COMMANDS}
# The old spellings kept for one release, and the options they stand for.
ALIASES = {
    ("teacher", "train"): {"--lr": "--learning-rate"},
    ("teacher", "label"): {},
    ("distill",): {"--lr": "--learning-rate"},
    ("export",): {
        "--optimizer": "--head-optimizer",
        "--learning-rate": "--head-learning-rate",
        "--batch-size": "--head-batch-size",
        "--epochs": "--head-epochs",
        "--texts": "--n-texts",
    },
    ("check",): {"--texts": "--n-texts"},
    ("augment",): {},
    ("augment", "adapt"): {"--lr": "--learning-rate"},
    ("bench",): {
        "--batch-sizes": "--infer-batches",
        "--train-seq-len": "--train-seq",
        "--budget": "--budget-s",
        "--matmul-size": "--matmul-n",
    },
}


def _command(path: tuple[str, ...]) -> click.Command:
    command = main
    for name in path:
        command = command.commands[name]  # a click.Group's, or AugmentCommand's `adapt`
    return command


def _options(command: click.Command) -> list[click.Option]:
    """The command's current options (not the hidden old spellings)."""
    return [p for p in command.params if isinstance(p, click.Option) and not p.hidden]


def _flag_name(option: click.Option) -> str:
    return max(option.opts, key=len).lstrip("-").replace("-", "_")


def name_problems(command: click.Command, cls: type, cli_only: set[str], config_only: set[str]) -> list[str]:
    """Where the command's options and `cls`'s fields differ: one line each; [] when they are one set of names."""
    fields = {f.name for f in dataclasses.fields(cls)}
    options = {p.name: p for p in _options(command)}
    problems = [
        f"{max(p.opts, key=len)} is not a setting of {cls.__name__}"
        for n, p in options.items()
        if n not in fields | cli_only
    ]
    problems += [f"{cls.__name__}.{f} has no option" for f in sorted(fields - set(options) - config_only)]
    problems += [
        f"{max(p.opts, key=len)} sets {n}: name the option after its field"
        for n, p in options.items()
        if n in fields and _flag_name(p) != n
    ]
    problems += [f"the allow-list names {n}, which is no option" for n in sorted(cli_only - set(options))]
    problems += [
        f"the allow-list names {cls.__name__}.{f}, which has an option" for f in sorted(config_only & set(options))
    ]
    return problems


def alias_problems(command: click.Command) -> list[str]:
    """Hidden options that are not the old spelling of a current option."""
    problems = []
    for param in command.params:
        if not getattr(param, "hidden", False):
            continue
        if not isinstance(param, OldName):
            problems.append(f"{param.opts[0]} is hidden but no old spelling")
        elif not any(param.new in p.opts for p in _options(command)):
            problems.append(f"{param.opts[0]} stands for {param.new}, which is no option")
    return problems


def _aliases(command: click.Command) -> dict[str, str]:
    return {p.opts[0]: p.new for p in command.params if isinstance(p, OldName)}


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_options_and_fields_are_one_set_of_names(path):
    assert name_problems(_command(path), COMMANDS[path], CLI_ONLY[path], CONFIG_ONLY[path]) == []


def test_check_options_are_export_settings():
    check = _command(("check",))
    fields = {f.name for f in dataclasses.fields(CHECK_SHARES)}
    assert {p.name for p in _options(check)} - CHECK_ONLY <= fields
    assert all(_flag_name(p) == p.name for p in _options(check) if p.name in fields)


def test_augment_keys_beside_the_settings_are_the_configs():
    """The [augment] keys a config holds beside AugmentSettings are the options allowed beside its fields."""
    assert SECTIONS["augment"] <= CLI_ONLY[("augment",)]
    assert SECTIONS["teacher"] - {"dir"} <= CLI_ONLY[("teacher", "train")]


def test_a_removed_added_or_misnamed_option_fails_the_check():
    distill = _command(("distill",))
    allowed = CLI_ONLY[("distill",)]
    without = click.Command("distill", params=[p for p in distill.params if p.name != "temperature"])
    assert name_problems(without, DistillSettings, allowed, set()) == ["DistillSettings.temperature has no option"]
    extra = click.Option(["--warmup-steps"], type=int, help="Not a setting.")
    added = click.Command("distill", params=[*distill.params, extra])
    assert name_problems(added, DistillSettings, allowed, set()) == [
        "--warmup-steps is not a setting of DistillSettings"
    ]
    old = click.Option(["--two-stage", "two_stage_epochs"], type=int, help="As before issue 30.")
    misnamed = click.Command("distill", params=[*(p for p in distill.params if p.name != "two_stage"), old])
    assert name_problems(misnamed, DistillSettings, allowed, set()) == [
        "--two-stage is not a setting of DistillSettings",
        "DistillSettings.two_stage has no option",
    ]
    old = click.Option(["--stages", "two_stage"], type=int, help="A flag that is not the field's name.")
    misnamed = click.Command("distill", params=[*(p for p in distill.params if p.name != "two_stage"), old])
    assert name_problems(misnamed, DistillSettings, allowed, set()) == [
        "--stages sets two_stage: name the option after its field"
    ]
    stale = allowed | {"no_such_option"}
    assert name_problems(distill, DistillSettings, stale, set()) == [
        "the allow-list names no_such_option, which is no option"
    ]


@pytest.mark.parametrize("path", ALIASES, ids=" ".join)
def test_every_hidden_option_is_the_old_spelling_of_a_current_one(path):
    command = _command(path)
    assert alias_problems(command) == []
    assert _aliases(command) == ALIASES[path]


def test_an_alias_of_a_removed_option_fails_the_check():
    orphan = click.Command("x", params=renamed("--lr", "--learning-rate")(lambda: None).__click_params__)
    assert alias_problems(orphan) == ["--lr stands for --learning-rate, which is no option"]
    hidden = click.Command("x", params=[click.Option(["--secret"], hidden=True, help="Hidden, no alias.")])
    assert alias_problems(hidden) == ["--secret is hidden but no old spelling"]


# What each command needs to parse, and a value each renamed option takes.
REQUIRED = {
    ("teacher", "train"): ["--model", "m", "--train", "t.csv", "--out", "o"],
    ("distill",): ["--teacher", "t", "--train", "t.csv", "--out", "o"],
    ("export",): ["student", "--out", "o"],
    ("check",): ["bundle"],
    ("augment", "adapt"): ["--model", "m", "--data", "d.csv", "--out", "o"],
    ("bench",): [],
}
SAMPLE = {
    "--learning-rate": "0.001",
    "--head-optimizer": "adam",
    "--head-learning-rate": "0.01",
    "--head-batch-size": "4",
    "--head-epochs": "5",
    "--n-texts": "4",
    "--infer-batches": "1,2",
    "--train-seq": "16",
    "--budget-s": "1",
    "--matmul-n": "256",
}


@pytest.mark.parametrize(
    "path, old, new",
    [(path, old, new) for path, aliases in ALIASES.items() for old, new in aliases.items()],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else v,
)
def test_an_old_spelling_gives_the_option_its_value_and_a_note(path, old, new, capsys):
    command = _command(path)
    name = next(p.name for p in _options(command) if new in p.opts)
    with command.make_context(path[-1], [*REQUIRED[path], new, SAMPLE[new]]) as ctx:
        expected = ctx.params[name]
    assert capsys.readouterr().err == ""
    with command.make_context(path[-1], [*REQUIRED[path], old, SAMPLE[new]]) as ctx:
        assert ctx.params[name] == expected
        assert ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE  # as given (static_runner asks)
        assert not any(n.startswith("old_") for n in ctx.params)  # the command body never sees the alias
    note = f"note: {old} is now {new}; the old spelling goes in the next release\n"
    assert capsys.readouterr().err == note


def test_old_and_new_spelling_together_is_a_usage_error():
    command = _command(("distill",))
    with pytest.raises(click.UsageError, match="give --learning-rate only"):
        command.make_context("distill", [*REQUIRED[("distill",)], "--lr", "1e-3", "--learning-rate", "1e-3"])


def test_distill_with_lr_runs_past_parsing_and_prints_the_note(tmp_path):
    """`--lr` on the command line: the note, then the command runs (here to a missing teacher: exit 4, not 2)."""
    (tmp_path / "t.csv").write_text("text,label\nhello,a\nworld,b\n", encoding="utf-8")
    args = ["distill", "--teacher", str(tmp_path / "none"), "--train", str(tmp_path / "t.csv")]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "s"), "--lr", "1e-3", "--quiet"])
    assert result.exit_code not in (0, 2), result.output
    assert result.stderr.count("note: --lr is now --learning-rate") == 1, result.output
    assert_one_line_error(result)


def test_an_old_config_key_names_the_new_one(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[data]\ntrain = "x.jsonl"\n[export]\nlearning_rate = 0.1\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(config)])
    assert result.exit_code == ConfigError.exit_code
    assert_one_line_error(result, "[export] learning_rate was renamed in mlx-edge 0.2", "write head_learning_rate =")


@pytest.mark.parametrize("old", sorted(ExportSettings.RENAMED))
def test_every_renamed_export_key_names_a_field(old, tmp_path):
    new, _ = ExportSettings.RENAMED[old]
    fields = {f.name for f in dataclasses.fields(ExportSettings)}
    assert new in fields and old not in fields
    config = tmp_path / "run.toml"
    config.write_text(f'[data]\ntrain = "x.jsonl"\n[export]\n{old} = 1\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"\[export\] {old} was renamed .*write {new} = "):
        PipelineConfig.from_toml(config)


def old_spellings_cited(text: str) -> list[str]:
    """The lines of `text` that run a command with an old (hidden) spelling of one of its options."""
    cited = []
    for line in text.replace("\\\n", " ").splitlines():  # continued shell lines joined
        runs = [(path, re.search(r"mlx-edge\s+" + r"\s+".join(path) + r"(?![\w-])([^`#|]*)", line)) for path in ALIASES]
        runs = [(path, match) for path, match in runs if match]
        if runs:  # the longest command path: `augment adapt`, not `augment`
            path, match = max(runs, key=lambda run: len(run[0]))
            flags = re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", match.group(1))
            cited += [line.strip() for flag in flags if flag in ALIASES[path]]
    return cited


def test_the_docs_cite_no_old_spelling():
    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", root / "swift" / "README.md", *sorted((root / "docs").glob("*.md"))]  # not CHANGELOG
    cited = {page.name: old_spellings_cited(page.read_text(encoding="utf-8")) for page in pages}
    assert {name: lines for name, lines in cited.items() if lines} == {}
    assert old_spellings_cited("    mlx-edge check ./bundle --texts 8\n") == ["mlx-edge check ./bundle --texts 8"]
    assert old_spellings_cited("mlx-edge augment adapt --model m --lr=1e-3 --out a") != []
