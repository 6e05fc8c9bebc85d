"""The transfer set (`--unlabeled`): reading unlabeled files in every shape, dropping repeats and
dev/test texts, one-line errors for files that cannot serve, and `teacher label` + `distill` learning
from the teacher on rows that have no gold label."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.distill.api import distill
from mlx_edge.distill.loop import LoopConfig
from mlx_edge.errors import DataError, DataWarning, DistillError
from mlx_edge.manifest import read_manifest
from mlx_edge.teacher.label import label_targets
from mlx_edge.transfer import read_unlabeled, transfer_set
from tests.helpers.cli import assert_one_line_error
from tests.helpers.tiny import toy_rows

MICRO = {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 24}


@pytest.mark.parametrize(
    "name, body, expected",
    [
        ("notes.txt", "first note\n\n  second note  \r\nthird\n", ["first note", "second note", "third"]),
        ("notes", "no suffix is one text per line\n", ["no suffix is one text per line"]),
        ("n.csv", 'id,text\n1,"a, quoted text"\n2,plain\n', ["a, quoted text", "plain"]),
        ("n.csv", "just one column\nof text\n", ["just one column", "of text"]),
        ("n.tsv", "Sentence\tsource\nhello there\tapp\n", ["hello there"]),
        # TSV as labeled files read it: cut at every tab, a quote is text (a stray one swallowed the file)
        ("n.tsv", 'id\ttext\n1\t"a stray quote\n2\t他说"明天见\n', ['"a stray quote', '他说"明天见']),
        ("n.jsonl", '{"text": "one"}\n\n{"text": " two "}\n', ["one", "two"]),
        ("n.jsonl", '"a bare string"\n"another"\n', ["a bare string", "another"]),
    ],
)
def test_unlabeled_files_read_in_every_shape(tmp_path, name, body, expected):
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    assert read_unlabeled(path) == expected


def test_a_csv_quote_left_open_is_warned_about(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text('text\nfine\n"opened, never closed\nnext\nlast\n', encoding="utf-8")
    with pytest.warns(DataWarning, match="1 rows run over several lines"):
        assert read_unlabeled(path)[0] == "fine"


def test_a_named_column_is_read(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_text('{"id": 1, "body": "from body", "text": "not this"}\n', encoding="utf-8")
    assert read_unlabeled(path, text_column="body") == ["from body"]


@pytest.mark.parametrize(
    "name, content, fragment",
    [
        ("empty.txt", b"", "has no text"),
        ("blank.txt", b"\n  \n\t\n", "has no text"),
        ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is binary"),
        ("gbk.txt", "中文".encode("gbk"), "is not UTF-8"),
        ("n.csv", b"id,body\n1,hello\n", "has no text column"),
        ("n.jsonl", b'{"body": "x"}\n', "has no text field"),
        ("n.jsonl", b"{not json\n", "is not JSON"),
    ],
)
def test_unusable_unlabeled_files_are_one_clear_error(tmp_path, name, content, fragment):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=fragment):
        read_unlabeled(path)


def test_missing_file_and_a_directory_are_refused(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_unlabeled(tmp_path / "nope.txt")
    with pytest.raises(DataError, match="is a directory"):
        read_unlabeled(tmp_path)


def test_repeats_labeled_rows_and_held_out_texts_are_dropped(tmp_path):
    path = tmp_path / "u.txt"
    path.write_text("new one\nlabeled row\nnew  one\na dev text\nnew two\na test text\n", encoding="utf-8")
    with pytest.warns(DataWarning, match="2 of 6 unlabeled texts .* equal a dev or test text"):
        got = transfer_set([path], labeled=["labeled row"], held_out=["a dev text", "a  test text"])
    assert got.texts == ["new one", "new two"]
    assert (got.read, got.held_out, got.repeats) == (6, 2, 2)
    assert "2 unlabeled texts" in got.summary() and "2 equal to dev/test texts" in got.summary()


def test_a_file_of_only_held_out_texts_is_refused(tmp_path):
    path = tmp_path / "u.txt"
    path.write_text("a dev text\nlabeled row\n", encoding="utf-8")
    with pytest.raises(DataError, match="no text of .* is left for the transfer set"):
        transfer_set([path], labeled=["labeled row"], held_out=["a dev text"])


@pytest.fixture(scope="module")
def unlabeled_file(toy_data, tmp_path_factory):
    """Toy-domain texts the training file lacks, plus 3 of the dev file's texts (leakage to drop)."""
    train_texts = {json.loads(line)["text"] for line in toy_data[0].read_text().splitlines()}
    dev_texts = [json.loads(line)["text"] for line in toy_data[1].read_text().splitlines()]
    fresh = []
    for row in toy_rows(400, 7):
        if row["text"] not in train_texts and row["text"] not in dev_texts and row["text"] not in fresh:
            fresh.append(row["text"])
    path = tmp_path_factory.mktemp("unlabeled") / "notes.txt"
    path.write_text("\n".join(fresh[:60] + dev_texts[:3]) + "\n", encoding="utf-8")
    return path, 60


def _loop(**overrides):
    return LoopConfig(**{**dict(epochs=1, batch_size=16, learning_rate=2e-3, seed=3), **overrides})


def test_distill_learns_from_unlabeled_rows_with_a_live_teacher(trained_teacher, toy_data, unlabeled_file, tmp_path):
    path, fresh = unlabeled_file
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    common = dict(teacher=trained_teacher, train=toy_data[0], dev=toy_data[1], student=str(config), progress=False)
    plain = distill(out=tmp_path / "plain", loop=_loop(), measure_speed=False, **common)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = distill(out=tmp_path / "s", unlabeled=[path], loop=_loop(), measure_speed=False, **common)
    assert [str(w.message) for w in caught if "equal a dev or test text" in str(w.message)]
    assert plain.transfer_rows == 0 and report.transfer_rows == fresh
    assert report.steps == -(-(240 - 0 + fresh) // 16) and plain.steps == -(-240 // 16)
    record = read_manifest(tmp_path / "s")["data"]
    assert [u["path"] for u in record["unlabeled"]] == [str(path)]


def test_teacher_label_then_distill_finds_the_unlabeled_rows_in_the_cache(
    trained_teacher, toy_data, unlabeled_file, tmp_path
):
    path, fresh = unlabeled_file
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    bare = tmp_path / "bare"
    layers = dict(hidden_layers=[0, 1, 2], attention_layers=[1, 2], backend="mlx", progress=False)
    label_targets(teacher=trained_teacher, data=[toy_data[0]], out=bare, **layers)
    with_unlabeled = tmp_path / "targets"
    result = label_targets(teacher=trained_teacher, data=[toy_data[0]], unlabeled=[path], out=with_unlabeled, **layers)
    assert result.examples == 240 + fresh + 3  # the cache holds every text; distill drops the dev ones
    common = dict(teacher=trained_teacher, train=toy_data[0], dev=toy_data[1], student=str(config), progress=False)
    with pytest.raises(DistillError, match=f"{fresh} of {240 + fresh} training texts are not in the targets cache"):
        distill(out=tmp_path / "x", targets=bare, unlabeled=[path], loop=_loop(), **common)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        report = distill(
            out=tmp_path / "s", targets=with_unlabeled, unlabeled=[path], loop=_loop(), measure_speed=False, **common
        )
    assert report.transfer_rows == fresh and report.steps == -(-(240 + fresh) // 16)


def test_cli_bad_unlabeled_files_are_one_line_errors_and_write_nothing(trained_teacher, toy_data, tmp_path):
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\x00\x01\x02binary")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    only_dev = tmp_path / "dev-copy.txt"
    only_dev.write_text("\n".join(json.loads(line)["text"] for line in toy_data[1].read_text().splitlines()[:5]) + "\n")
    base = ["distill", "--teacher", str(trained_teacher), "--train", str(toy_data[0]), "--dev", str(toy_data[1])]
    for path, fragment in [(binary, "is binary"), (empty, "has no text"), (only_dev, "is left for the transfer set")]:
        out = tmp_path / f"out-{path.stem}"
        result = CliRunner().invoke(main, [*base, "--unlabeled", str(path), "--out", str(out), "--quiet"])
        assert_one_line_error(result, fragment)
        assert not out.exists() and not out.with_name(f".{out.name}.work").exists()
    out = tmp_path / "t"
    result = CliRunner().invoke(
        main,
        [
            "teacher",
            "label",
            "--teacher",
            str(trained_teacher),
            "--data",
            str(toy_data[0]),
            "--unlabeled",
            str(binary),
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert_one_line_error(result, "is binary")
    assert not out.exists()


# ---- the report's lines for a result that learned nothing -----------------------------------------


def test_trivial_scores_and_flat_soft_labels_get_one_line_each():
    from mlx_edge.metrics import flat_soft_labels_note, trivial_note

    assert "no better than chance (50.0%)" in trivial_note("student", 0.494, majority=0.3, num_labels=2)
    note = trivial_note("teacher", 0.61, majority=0.6, num_labels=6, split="test")
    assert "test accuracy 61.0% is no better than always answering the most common label (60.0%)" in note
    assert trivial_note("student", 0.70, majority=0.6, num_labels=2) is None
    flat = np.array([[0.52, 0.48], [0.47, 0.53], [0.55, 0.45]])
    assert "nearly uniform (mean top probability 0.53, uniform 0.50)" in flat_soft_labels_note(flat)
    assert flat_soft_labels_note(np.array([[0.9, 0.1], [0.2, 0.8]])) is None
    assert flat_soft_labels_note(np.full((4, 6), 1 / 6)) is not None and flat_soft_labels_note(np.eye(6)) is None


def test_distilling_an_untrained_teacher_says_so(base_dir, toy_data, tmp_path):
    """The 300-row collapse of issue 29: a teacher that learned nothing passes near-uniform soft labels
    on, and a student of it is at chance; the report says both, in lines a user reads."""
    from mlx_edge.models.checkpoint import load_model, save_model

    teacher = tmp_path / "untrained"
    model = load_model(base_dir, labels=["finance", "health"], seed=0)  # a random head, never trained
    save_model(model, teacher, tokenizer_from=base_dir)
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    report = distill(
        teacher=teacher,
        train=toy_data[0],
        dev=toy_data[1],
        student=str(config),
        out=tmp_path / "s",
        loop=_loop(),
        measure_speed=False,
        progress=False,
    )
    assert any("soft labels are nearly uniform" in n for n in report.notes), report.notes
    assert any(n.startswith("the teacher's dev accuracy") for n in report.notes), report.notes
    result = CliRunner().invoke(
        main,
        ["distill", "--teacher", str(teacher), "--train", str(toy_data[0]), "--dev", str(toy_data[1])]
        + ["--student", str(config), "--epochs", "1", "--out", str(tmp_path / "s2"), "--quiet"],
    )
    assert result.exit_code == 0, result.output
    assert "note: the teacher's soft labels are nearly uniform" in result.output


# ---- the pipeline: [data] unlabeled -----------------------------------------------------------------


def test_pipeline_unlabeled_files_that_cannot_serve_stop_before_any_stage(base_dir, toy_data, tmp_path):
    from tests.helpers.pipeline import write_config

    bad = tmp_path / "blob.txt"
    bad.write_bytes(b"\x00\x00binary")
    for value, fragment in [
        (str(bad), "is binary"),
        (str(tmp_path / "missing.txt"), "does not exist"),
        (7, "[data] unlabeled must be a file or a list of files"),
    ]:
        config = write_config(tmp_path, base_dir, toy_data, data={"unlabeled": value})
        assert_one_line_error(CliRunner().invoke(main, ["run", str(config), "--quiet"]), fragment)
        assert not (tmp_path / "work" / "teacher").exists()
    dev_copy = tmp_path / "dev-copy.txt"
    dev_copy.write_text("\n".join(json.loads(x)["text"] for x in toy_data[1].read_text().splitlines()) + "\n")
    config = write_config(tmp_path, base_dir, toy_data, data={"unlabeled": [str(dev_copy)]})
    assert_one_line_error(CliRunner().invoke(main, ["run", str(config), "--quiet"]), "is left for the transfer set")
    assert not (tmp_path / "work" / "teacher").exists()


def test_an_unlabeled_file_with_no_teacher_is_one_error_and_no_workspace(toy_data, unlabeled_file, tmp_path):
    config = tmp_path / "run.toml"
    path, _ = unlabeled_file
    config.write_text(
        f'[pipeline]\nout = "{tmp_path / "work"}"\n\n[data]\ntrain = "{toy_data[0]}"\nunlabeled = ["{path}"]\n'
    )
    assert_one_line_error(CliRunner().invoke(main, ["run", str(config), "--quiet"]), "[teacher] needs model")
    assert not (tmp_path / "work").exists()
    result = CliRunner().invoke(main, ["distill", "--train", str(toy_data[0]), "--unlabeled", str(path), "--out", "x"])
    assert result.exit_code == 2 and "--teacher" in result.output and not (tmp_path / "x").exists()


@pytest.mark.slow  # a whole micro pipeline run
def test_pipeline_distills_on_the_unlabeled_rows(base_dir, toy_data, unlabeled_file, tmp_path):
    from tests.helpers.pipeline import write_config

    path, fresh = unlabeled_file
    config = write_config(tmp_path, base_dir, toy_data, data={"unlabeled": [str(path)]})
    result = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "work" / "student")
    assert manifest["report"]["transfer_rows"] == fresh  # the 3 dev (= test) texts dropped
    assert [u["path"] for u in manifest["data"]["unlabeled"]] == [str(path)]
    targets = json.loads((tmp_path / "work" / "targets" / "mlx_edge_manifest.json").read_text())
    assert targets["examples"] == 240 + fresh + 3
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert report["check"]["ok"] and report["accuracy"]["test"]["teacher"] > 0.7
    # the micro teacher ranks right but barely moves off uniform (top probability ~0.51): said, once
    assert not [n for n in report["notes"] if "no better than" in n]
    assert [n for n in report["notes"] if "nearly uniform" in n] == report["notes"][:1]
