"""The new-job forms of `mlx-edge serve`: defaults are the demo's and `augment adapt`'s, each bad field gets
its own one-line message, and the params become the pipeline config `mlx-edge run` would run."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_edge.demo import demo_config
from mlx_edge.serve.forms import ADAPT_DEFAULTS, DISTILL_DEFAULTS, FormErrors, adapt_params, distill_params
from mlx_edge.serve.worker import _named, pipeline_config
from mlx_edge.settings import ADAPT


def test_form_defaults_are_the_demo_recipe_and_adapts(tmp_path):
    demo = demo_config(out=tmp_path)
    params = distill_params(DISTILL_DEFAULTS, {})
    assert params["teacher"] == demo.teacher["model"] and params["student"] == demo.distill["student"]
    assert (params["teacher_epochs"], params["distill_epochs"]) == (demo.teacher["epochs"], demo.distill["epochs"])
    assert params["max_length"] == demo.teacher["max_length"]
    assert (params["teacher_lr"], params["student_lr"]) == (
        demo.teacher["learning_rate"],
        demo.distill["learning_rate"],
    )
    config = pipeline_config(params, tmp_path, {})
    assert (config.teacher, config.distill, config.export, config.label) == (
        demo.teacher,
        demo.distill,
        demo.export,
        demo.label,
    )
    adapt = {k: str(v) for k, v in ADAPT.kwargs().items() if k in ADAPT_DEFAULTS}
    assert adapt == {k: v for k, v in ADAPT_DEFAULTS.items() if k != "model"}


def test_each_bad_field_says_what_is_wrong():
    form = {
        **DISTILL_DEFAULTS,
        "data": "upload",
        "teacher": "/nowhere/teacher",
        "student": "giant",
        "teacher_epochs": "0",
        "distill_epochs": "two",
        "teacher_lr": "nan",
        "device": "tpu",
    }
    with pytest.raises(FormErrors) as caught:
        distill_params(form, {})
    errors = caught.value.errors
    assert set(errors) == {
        "train_file",
        "teacher",
        "student",
        "teacher_epochs",
        "distill_epochs",
        "teacher_lr",
        "device",
    }
    assert "the server takes no model paths" in errors["teacher"] and "out of range" in errors["teacher_epochs"]
    assert "not a whole number" in errors["distill_epochs"] and "out of range" in errors["teacher_lr"]
    with pytest.raises(FormErrors) as caught:
        adapt_params({**ADAPT_DEFAULTS, "model": "no-such-llm", "rank": "-1"}, {})
    assert set(caught.value.errors) == {"data_file", "model", "rank"}


def test_model_fields_take_built_in_names_or_paths_inside_the_models_folder_only(tmp_path):
    models = tmp_path / "models"
    (models / "teacher").mkdir(parents=True)
    (models / "teacher" / "config.json").write_text("{}")
    (models / "student.json").write_text("{}")
    (models / "llm").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text("{}")
    (models / "escape").symlink_to(tmp_path / "outside")
    form = {**DISTILL_DEFAULTS, "teacher": "teacher", "student": str(models / "student.json"), "augment_llm": "llm"}
    params = distill_params(form, {}, models_dir=models)
    assert params["teacher"] == str((models / "teacher").resolve())
    assert params["student"] == str((models / "student.json").resolve())
    assert params["augment_llm"] == str((models / "llm").resolve())
    assert adapt_params({**ADAPT_DEFAULTS, "model": "llm"}, {"data_file": "d.jsonl"}, models_dir=models)["model"]

    def refused(field, value, models_dir=models):
        with pytest.raises(FormErrors) as caught:
            distill_params({**DISTILL_DEFAULTS, field: value}, {}, models_dir=models_dir)
        return caught.value.errors[field]

    # outside the folder: one answer whether the path exists or not (no probe of the server's disk)
    existing, missing = refused("student", "/etc/passwd"), refused("student", "/etc/nope")
    assert existing.replace("/etc/passwd", "X") == missing.replace("/etc/nope", "X")
    assert "nor a path in the models folder" in existing
    for field, value in [("teacher", "../outside"), ("teacher", "escape"), ("augment_llm", "/etc"), ("teacher", "")]:
        assert "nor a path in the models folder" in refused(field, value), (field, value)
    assert "is not a model folder" in refused("teacher", "llm")  # inside, but not what the field needs
    assert "takes no model paths" in refused("student", str(models / "student.json"), models_dir=None)
    assert "takes no model paths" in refused("augment_llm", "/etc", models_dir=None)


def test_upload_jobs_read_the_uploads_and_augment_needs_a_dev_file(tmp_path):
    uploads = {"train": str(tmp_path / "a.jsonl"), "dev": str(tmp_path / "b.jsonl")}
    params = distill_params({**DISTILL_DEFAULTS, "data": "upload"}, {"train_file": "t.csv", "dev_file": "d.csv"})
    config = pipeline_config(params, tmp_path, uploads)
    assert (config.train, config.dev, config.test) == (Path(uploads["train"]), Path(uploads["dev"]), None)
    on = distill_params({**DISTILL_DEFAULTS, "augment": "on", "augment_per_class": "7"}, {})
    augment = pipeline_config(on, tmp_path, {}).augment
    assert augment["per_class"] == 7 and augment["llm"] == DISTILL_DEFAULTS["augment_llm"]
    assert pipeline_config(params, tmp_path, uploads).augment == {}  # off unless asked for
    with pytest.raises(FormErrors, match="augment needs a dev file"):
        distill_params({**DISTILL_DEFAULTS, "data": "upload", "augment": "on"}, {"train_file": "t.csv"})


def test_worker_errors_name_uploads_as_the_user_did():
    params = {"uploads": {"train": "/w/uploads/0a1b.jsonl"}, "files": {"train": "my rows.jsonl"}}
    assert _named("/w/uploads/0a1b.jsonl line 3: empty text", params) == "my rows.jsonl (train file) line 3: empty text"
