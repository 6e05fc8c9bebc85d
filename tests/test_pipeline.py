"""`mlx-edge run` on a micro configuration, and `mlx-edge demo` on a small sample with the real MiniLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlx_edge import ladder
from mlx_edge.cli import main
from mlx_edge.errors import ManifestError
from mlx_edge.manifest import MANIFEST_NAME
from mlx_edge.pipeline import PipelineConfig, distill_summary, final_report, format_distill
from tests.helpers.cli import assert_one_line_error
from tests.helpers.pipeline import write_config


@pytest.mark.slow  # three pipeline runs, five stages and the report each, ending in a full export
def test_run_micro_pipeline_then_skip_finished_stages(base_dir, toy_data, tmp_path):
    config = write_config(tmp_path, base_dir, toy_data)
    first = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert first.exit_code == 0, first.output
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in report["stages"]][-2:] == [("check", "ran"), ("report", "ran")]
    assert [s["status"] for s in report["stages"]] == ["ran"] * 6
    assert report["seconds"] >= sum(s["seconds"] for s in report["stages"])  # the total is the whole run's
    assert report["check"] == {"ok": True, "failed": []}
    assert report["accuracy"]["test"]["teacher"] > 0.7  # the toy set is separable
    (english,) = report["accuracy_by_language"]["test"].values()  # the toy rows are English words only
    assert english["teacher"] == report["accuracy"]["test"]["teacher"] and english["examples"] > 0
    assert report["parameters"]["student"] < report["parameters"]["teacher"]
    files = set(report["bundle"]["files"])
    assert {"Encoder.mlpackage", "Head.mlmodel", "manifest.json", "vocab.txt"} <= files
    assert not files & {"Classifier.mlpackage", "model.onnx"}  # extras are opt-in: the app loads neither
    assert (tmp_path / "work" / "targets" / "mlx_edge_manifest.json").is_file()
    targets = json.loads((tmp_path / "work" / "targets" / "mlx_edge_manifest.json").read_text())
    assert targets["hidden_layers"] == [2]  # derived from the 1-layer student's mapping to the 2-layer teacher
    assert "check: PASSED" in first.output
    (row,) = report["bundle_table"]  # this bundle's row: its dev accuracy is the report's own student's
    assert row["dev_accuracy"] == report["accuracy"]["dev"]["student"] and row["precision"] == "fp16"
    assert row["bundle_bytes"] == sum(report["bundle"]["files"].values()) and row["mlx_ms"] > 0
    assert "recommended: fp16" in first.output and "total" in first.output
    # how the student trained, as its loop logged it: one metrics line per epoch; the toy file is a few
    # steps an epoch, so min_steps ran more than the 2 epochs asked
    epochs = len((tmp_path / "work" / "student" / "metrics.jsonl").read_text().splitlines())
    assert report["distill"]["epochs_run"] == epochs > 2 and report["distill"]["transfer_rows"] == 0
    assert f"distill: {epochs} epochs (2 asked, too few steps for min_steps 300)" in first.output
    assert "over the labeled rows alone (no transfer set)" in first.output

    second = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert second.exit_code == 0, second.output
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert [s["status"] for s in report["stages"][:4]] == ["skipped (up to date)"] * 4

    # a changed distill setting re-runs distill and what follows, not the teacher or the labels
    write_config(tmp_path, base_dir, toy_data, epochs=1)
    third = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert third.exit_code == 0, third.output
    statuses = [s["status"] for s in json.loads((tmp_path / "work" / "report.json").read_text())["stages"]]
    assert statuses == ["skipped (up to date)", "skipped (up to date)", "ran", "ran", "ran", "ran"]


def _summary(**changes) -> dict:
    loop = {"epochs": 10, "min_steps": 300, "step_budget": 1500}
    report = {
        "epochs_run": 3,
        "steps": 1464,
        "stopped_early": False,
        "transfer_rows": 14000,
        "best_epoch": 3,
        "kept": "last",
    }
    for key, value in changes.items():
        (loop if key in loop else report)[key] = value
    return distill_summary({"loop": loop, "report": report})


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {},
            "distill: 3 of 10 epochs (step budget 1,500), 1,464 steps, over the labeled rows and 14,000 transfer "
            "texts; kept epoch 3 (the last)",
        ),
        (
            {"epochs_run": 10, "step_budget": None, "kept": "best", "best_epoch": 7},
            "distill: 10 epochs, 1,464 steps, over the labeled rows and 14,000 transfer texts; kept epoch 7 (the best on dev)",
        ),
        (
            {"epochs_run": 34, "transfer_rows": 0, "step_budget": None},
            "distill: 34 epochs (10 asked, too few steps for min_steps 300), 1,464 steps, over the labeled rows alone",
        ),
        ({"epochs_run": 4, "stopped_early": True}, "distill: 4 of 10 epochs (stopped early: no dev gain)"),
    ],
)
def test_the_report_says_how_many_epochs_the_student_trained_and_why(changes, expected):
    line = format_distill(_summary(**changes))
    assert line.startswith(expected), line
    assert format_distill({}) is None and format_distill(distill_summary({})) is None  # a report of an older version
    assert format_distill({**_summary(), "steps": None}) is None


def test_bad_configs_get_one_line(tmp_path):
    assert_one_line_error(CliRunner().invoke(main, ["run", str(tmp_path / "nope.toml")]), "does not exist")
    (tmp_path / "bad.toml").write_text("[data\ntrain = 1")
    assert_one_line_error(CliRunner().invoke(main, ["run", str(tmp_path / "bad.toml")]), "not valid TOML")
    (tmp_path / "nodata.toml").write_text("[teacher]\nmodel = 'x'\n")
    assert_one_line_error(CliRunner().invoke(main, ["run", str(tmp_path / "nodata.toml")]), "[data] needs train")
    (tmp_path / "typo.toml").write_text("[data]\ntrain = 'a.csv'\n[distil]\nepochs = 1\n")
    assert_one_line_error(CliRunner().invoke(main, ["run", str(tmp_path / "typo.toml")]), "unknown section(s) distil")
    (tmp_path / "key.toml").write_text("[data]\ntrain = 'a.csv'\n[distill]\nepoch = 1\n")
    result = CliRunner().invoke(main, ["run", str(tmp_path / "key.toml")])
    assert_one_line_error(result, "unknown setting 'epoch' in [distill]")
    assert "did you mean 'epochs'" in result.output


def test_example_config_parses():
    from mlx_edge.pipeline import STAGE_SETTINGS, PipelineConfig, stage_settings
    from mlx_edge.settings import PIPELINE

    config = PipelineConfig.from_toml(Path(__file__).resolve().parents[1] / "examples" / "pipeline.toml")
    for name, cls in STAGE_SETTINGS.items():  # the example is `mlx-edge init`'s: every setting at its default
        if name != "pipeline":
            assert stage_settings(config, name) == cls(), name
    assert (config.device, config.seed, config.bundles) == (PIPELINE.device, PIPELINE.seed, PIPELINE.bundles)


def test_demo_epochs_given_are_exact_and_defaults_keep_the_step_floors(tmp_path, monkeypatch):
    import mlx_edge.cli.run as cli_run

    seen = []
    monkeypatch.setattr(cli_run, "_run", lambda config, quiet: seen.append(config))  # the config, not the run
    for args in ([], ["--teacher-epochs", "2", "--distill-epochs", "3"]):
        result = CliRunner().invoke(main, ["demo", "--out", str(tmp_path), "--limit", "40", *args])
        assert result.exit_code == 0, result.output
    default, given = seen
    assert "min_steps" not in default.teacher and default.distill == {}
    assert given.teacher["epochs"] == 2 and given.teacher["min_steps"] == 0
    assert given.distill == {"epochs": 3, "min_steps": 0}


@pytest.mark.slow  # every stage on the real MiniLM teacher
@pytest.mark.pretrained
def test_demo_end_to_end_on_a_sample(tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "demo",
            "--out",
            str(tmp_path),
            "--limit",
            "150",
            "--teacher-epochs",
            "1",
            "--distill-epochs",
            "1",
            "--bundles",
            "fp16,int8",
            "--quiet",
        ],  # fmt: skip
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["check"]["ok"] is True
    assert set(report["accuracy"]) == {"dev", "test"}
    assert report["parameters"]["teacher"] > 100e6  # the real multilingual-e5-small (117.5M)
    assert report["parameters"]["student"] < 20e6  # 4 layers and a pruned vocabulary
    assert set(report["accuracy_by_language"]["dev"]) == {"zh", "en"}
    assert "retained" in result.output and "check: PASSED" in result.output
    assert [row["bundle"] for row in report["bundles"]] == ["fp16", "int8"]
    assert report["bundles"][1]["precision"] == "int8-block" and report["bundles"][1]["kind"].endswith("emb 160")
    # --teacher-epochs and --distill-epochs are exact (a quick look), not raised to the stages' step floors
    distilled = json.loads((tmp_path / "student" / "report.json").read_text())
    assert distilled["epochs_run"] == 1 and distilled["steps"] == 5  # 150 sampled rows, batch 32 (the floor: 300)


def test_the_report_refuses_a_student_whose_manifest_has_no_distill_report(tmp_path):
    """A hand-placed or damaged student folder (its manifest lacks the distill report) gets one line
    naming the folder and what to do, not a KeyError, before any model is loaded."""
    student = tmp_path / "out" / "student"
    student.mkdir(parents=True)
    (student / MANIFEST_NAME).write_text(json.dumps({"kind": "student", "max_length": 16}))
    config = PipelineConfig(out=tmp_path / "out", train=tmp_path / "train.csv")
    rung = ladder.Rung(kind="fp16", steps=(), student="student", bundle="bundle")
    with pytest.raises(ManifestError) as caught:
        final_report(config, tmp_path / "teacher", [rung], {}, [])
    assert str(student) in caught.value.message and "no distill report" in caught.value.message
    assert "redistill" in caught.value.hint
