"""The bundle ladder (mlx_edge/ladder.py): every kind from one micro pipeline, checked, in one table.

The micro teacher (2 layers, 32 wide, 4 heads) makes the same ladder as the demo's at its own
scale: int8 splits the student's table to 16, int4 cuts a 32-wide student (MLX's groups of 32 and the
teacher's 4 heads divide it; too narrow for a split whose width 32 divides), the static student is a
32-wide table.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.distill.loop import LoopConfig, run_epochs
from mlx_edge.ladder import SPLIT, _continued
from mlx_edge.settings import DISTILL, EDITS_STEP_BUDGET
from tests.helpers.cli import assert_one_line_error
from tests.helpers.pipeline import write_config

LADDER = ("fp16", "int8", "int4", "static")


@pytest.mark.slow  # six distillations and four exports of micro models
def test_the_ladder_makes_every_bundle_checks_each_and_recommends_one(base_dir, toy_data, tmp_path):
    config = write_config(tmp_path, base_dir, toy_data, bundles=LADDER)
    first = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert first.exit_code == 0, first.output
    work = tmp_path / "work"
    report = json.loads((work / "report.json").read_text())
    names = [s["name"] for s in report["stages"]]
    assert names == [
        "teacher", "label", "distill", "export", "int8 split", "int8 export", "int4 student", "int4 split",
        "int4 qat", "int4 export", "static student", "static export", "check", "report",
    ]  # fmt: skip
    rows = {row["bundle"]: row for row in report["bundles"]}
    assert list(rows) == list(LADDER)
    assert all(row["check"] is True for row in rows.values()) and report["check"] == {"ok": True, "failed": []}
    modes = {
        kind: (json.loads((Path(row["path"]) / "manifest.json").read_text()).get("quantize") or {}).get("mode")
        for kind, row in rows.items()
    }
    assert modes == {"fp16": "none", "int8": "int8-block", "int4": "int4-block", "static": "none"}
    assert rows["int8"]["kind"] == "bert 1x32, emb 16"  # the student's table split to half its width
    assert rows["int4"]["kind"] == "bert 2x32" and rows["int4"]["precision"] == "int4-block QAT"
    assert rows["static"]["kind"].startswith("static")
    for row in rows.values():  # each row's accuracy is its own student's, on dev and test
        assert set(row["accuracy"]) == {"dev", "test"} and row["accuracy"]["dev"] == row["dev_accuracy"]
    assert rows["fp16"]["accuracy"]["dev"] == report["accuracy"]["dev"]["student"]
    best = {key: max(row[key] for row in rows.values()) for key in ("dev_accuracy", "agreement")}
    near = [row for row in rows.values() if all(row[k] >= best[k] - 0.01 - 1e-9 for k in best)]
    assert report["recommended"] == min(near, key=lambda row: row["bundle_bytes"])["bundle"]
    assert f"recommended: {report['recommended']}" in first.output and "check: PASSED" in first.output
    assert "int4-block QAT" in first.output and "total" in first.output

    again = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert again.exit_code == 0, again.output
    statuses = [s["status"] for s in json.loads((work / "report.json").read_text())["stages"]]
    assert statuses[:-2] == ["skipped (up to date)"] * 12 and statuses[-2:] == ["ran", "ran"]  # check, report


@pytest.mark.slow  # three distillations and three exports of micro models
def test_the_auto_student_is_the_int4_bundles_student_too(base_dir, toy_data, tmp_path):
    """With `student = "auto"` (the default) int4 splits and quantizes [distill]'s student: no student of
    its own, and the split starts from the distilled weights (1 epoch at 1e-5 barely moves them)."""
    import numpy as np
    from mlx.utils import tree_flatten

    from mlx_edge.models.checkpoint import load_model

    config = write_config(tmp_path, base_dir, toy_data, bundles=("fp16", "int8", "int4"), student="auto", init="auto")
    result = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert result.exit_code == 0, result.output
    work = tmp_path / "work"
    report = json.loads((work / "report.json").read_text())
    assert [s["name"] for s in report["stages"]] == [
        "teacher", "label", "distill", "export", "int8 split", "int8 export", "int4 split", "int4 qat",
        "int4 export", "check", "report",
    ]  # fmt: skip
    assert not (work / "student-int4-float").exists()
    rows = {row["bundle"]: row for row in report["bundles"]}
    assert rows["fp16"]["kind"] == "bert 2x32"  # the micro teacher's 2 layers, 32 wide (32 and its 4 heads divide it)
    assert rows["int4"]["kind"].startswith("bert 2x32") and rows["int4"]["precision"] == "int4-block QAT"
    assert report["check"] == {"ok": True, "failed": []}

    def layer(directory):
        weights = dict(tree_flatten(load_model(directory).parameters()))
        return np.asarray(weights["bert.encoder.layer.1.attention.self.query.weight"])

    student, split = layer(work / "student"), layer(work / "student-int4-split")
    assert np.abs(split - student).max() < 1e-2 < np.abs(student).max()


def test_the_auto_student_follows_the_teacher_and_falls_back_to_tiny():
    from mlx_edge.distill.student import PRESETS, student_config
    from mlx_edge.ladder import shares_student
    from mlx_edge.models.bert import BertConfig
    from mlx_edge.settings import DistillSettings

    e5 = BertConfig(hidden_size=384, num_attention_heads=12, intermediate_size=1536, num_hidden_layers=12)
    auto, source = student_config("auto", e5)
    assert (auto.num_hidden_layers, auto.hidden_size, auto.intermediate_size, source) == (4, 288, 1536, None)
    narrow = BertConfig(hidden_size=24, num_attention_heads=2, intermediate_size=48, num_hidden_layers=2)
    fallback, _ = student_config("auto", narrow)  # no cut that 32 and 2 heads divide: TinyBERT-4's shape
    assert (fallback.hidden_size, fallback.intermediate_size) == (PRESETS["tiny"]["hidden_size"], 1200)
    assert shares_student(DistillSettings()) and DistillSettings().student == "auto"
    assert not shares_student(DistillSettings(student="tiny"))
    assert not shares_student(DistillSettings(embedding_size=128))  # a factorized table: int4 splits its own


def test_an_unknown_bundle_kind_gets_one_line(tmp_path, base_dir, toy_data):
    config = write_config(tmp_path, base_dir, toy_data, bundles=("fp16", "int3"))
    result = CliRunner().invoke(main, ["run", str(config)])
    assert_one_line_error(result, "names 'int3', which is not a bundle kind")
    assert "fp16, int8, int4, static" in result.output
    assert not (tmp_path / "work").exists()
    demo = CliRunner().invoke(main, ["demo", "--bundles", "fp16,fp8", "--out", str(tmp_path / "demo")])
    assert demo.exit_code == 2 and "'fp8' is not a bundle kind" in demo.output


def test_a_ladder_entry_the_teacher_cannot_make_gets_one_line_before_any_work(tmp_path, toy_data):
    """int4 needs a student whose widths 32 (MLX's group) and the teacher's heads divide: a 24-wide
    teacher with 2 heads has none."""
    from tests.helpers.tiny import build_tiny_bert

    teacher = build_tiny_bert(tmp_path / "narrow", hidden_size=24, num_attention_heads=2, intermediate_size=48)
    config = write_config(tmp_path, teacher, toy_data, bundles=("fp16", "int4"))
    text = config.read_text().replace(f'[teacher]\nmodel = "{teacher}"', f'[teacher]\ndir = "{teacher}"')
    config.write_text(text)
    result = CliRunner().invoke(main, ["run", str(config)])
    assert_one_line_error(result, "bundles: int4 needs a student cut from the teacher")
    assert "drop int4 from [pipeline] bundles" in result.output
    assert not (tmp_path / "work" / "targets").exists()  # refused before labelling


def test_a_static_main_student_cannot_feed_the_layered_kinds(tmp_path, base_dir, toy_data):
    config = write_config(tmp_path, base_dir, toy_data, bundles=("fp16", "static"), student="static")
    result = CliRunner().invoke(main, ["run", str(config)])
    assert_one_line_error(result, 'student = "static" has no layers')
    assert 'bundles = ["static"]' in result.output


def test_the_demo_is_the_defaults(tmp_path):
    """`mlx-edge demo` sets its data and teacher and nothing else: its recipe is every stage's defaults."""
    from mlx_edge.demo import demo_config
    from mlx_edge.pipeline import STAGE_SETTINGS, stage_settings
    from mlx_edge.settings import DEMO_TEACHER, PIPELINE

    config = demo_config(out=tmp_path)
    assert config.teacher == {"model": DEMO_TEACHER}
    assert (config.augment, config.label, config.distill, config.export) == ({}, {}, {}, {})
    assert config.bundles == PIPELINE.bundles == ("fp16", "int8", "int4", "static")
    assert (config.device, config.seed) == (PIPELINE.device, PIPELINE.seed)
    for name in ("teacher", "label", "distill", "export"):
        assert stage_settings(config, name) == STAGE_SETTINGS[name](), name


def test_the_int4_student_is_cut_to_what_mlx_groups_and_the_heads_divide():
    from mlx_edge.ladder import int4_shape, split_width
    from mlx_edge.models.bert import BertConfig

    e5 = BertConfig(hidden_size=384, num_attention_heads=12, intermediate_size=1536, num_hidden_layers=12)
    assert int4_shape(e5) == {
        "num_hidden_layers": 4,
        "hidden_size": 288,
        "num_attention_heads": 12,
        "intermediate_size": 1536,
        "hidden_act": e5.hidden_act,
    }  # fmt: skip  (the measured int4 student of docs/quantization.md)
    base = BertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_hidden_layers=12)
    assert int4_shape(base)["hidden_size"] == 288 and int4_shape(base)["intermediate_size"] == 1536
    five_heads = BertConfig(hidden_size=320, num_attention_heads=5, intermediate_size=1280, num_hidden_layers=6)
    assert int4_shape(five_heads)["hidden_size"] == 160  # lcm(32, 5) = 160
    assert (split_width(312), split_width(288), split_width(32)) == (160, 160, 16)


def test_the_recommended_bundle_is_the_smallest_near_the_best_on_accuracy_and_agreement():
    """The figures of the demo's ladder: static is as accurate on dev but disagrees more with the teacher."""
    from mlx_edge.pipeline import recommend

    def row(kind, mb, dev, agreement, check=True):
        return {"bundle": kind, "bundle_bytes": mb * 1e6, "dev_accuracy": dev, "agreement": agreement, "check": check}

    ladder = [row("fp16", 18.97, 0.927, 0.922), row("int8", 7.95, 0.927, 0.925), row("int4", 4.89, 0.918, 0.910),
              row("static", 1.44, 0.920, 0.905)]  # fmt: skip
    assert recommend(ladder) == "int8"
    assert recommend([*ladder[:3], row("static", 1.44, 0.920, 0.920)]) == "static"
    assert recommend([*ladder[:1], row("int8", 7.95, 0.927, 0.925, check=False)]) == "fp16"  # a failed check
    assert recommend([]) is None
    # the most accurate disagrees most, the most faithful scores lowest: none is near the best on both
    apart = [row("fp16", 18.97, 0.70, 0.60), row("int8", 7.95, 0.66, 0.64), row("static", 1.44, 0.62, 0.62)]
    assert recommend(apart) == "fp16"


def test_the_ladders_short_fine_tunes_run_their_epochs_exactly():
    """The int8/int4 splits and QAT fine-tune a distilled student for 1-3 epochs: neither the step floor
    (a few hundred rows) nor the step budget (a large transfer set) may change that count."""
    loop = LoopConfig.from_settings(_continued(replace(DISTILL, step_budget=EDITS_STEP_BUDGET), **SPLIT))
    assert DISTILL.min_steps > 0  # what the defaults would otherwise do
    assert [run_epochs(loop, steps) for steps in (9, 85, 3210)] == [SPLIT["epochs"]] * 3
