"""`mlx-edge augment` end to end: a scripted generator where outputs must be exact, a tiny random
mlx-lm model (built here) for the real path, the tiny trained teacher for cleaning."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlx_edge.augment.api import COLUMNS, augment, transfer_path
from mlx_edge.augment.dedup import Deduper
from mlx_edge.augment.generate import MlxLmGenerator, ScriptedGenerator
from mlx_edge.augment.parse import parse_answer
from mlx_edge.cli import main
from mlx_edge.data import read_labeled
from mlx_edge.errors import AugmentError
from tests.helpers.cli import assert_one_line_error
from tests.helpers.llm import AUGMENT_SEEDS, build_tiny_llm
from tests.helpers.tiny import WORDS, write_jsonl

SEEDS = AUGMENT_SEEDS


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory) -> Path:
    return build_tiny_llm(tmp_path_factory.mktemp("llm") / "tiny-qwen2")


@pytest.fixture
def seeds(tmp_path) -> Path:
    return write_jsonl(tmp_path / "seeds.jsonl", SEEDS)


def asked(prompt: str) -> str:
    return re.search(r'The class is "([^"]+)"', prompt).group(1)


def messy_answer(prompt: str, call: int) -> str:
    """Three on-topic examples in a numbered list, one the teacher will disagree with, a seed copy."""
    label = asked(prompt)
    other = "health" if label == "finance" else "finance"
    rng = random.Random(call)
    made = [" ".join(rng.choice(WORDS[label]) for _ in range(rng.randint(3, 6))) for _ in range(3)]
    return "\n".join(
        [
            f'Here are 5 new examples of "{label}":',
            "",
            *(f'{k}. "{t}"' for k, t in enumerate(made, 1)),
            f"4) {' '.join(WORDS[other])}",
            f"5) {SEEDS[0 if label == 'finance' else 3]['text']}",
            "",
        ]
    )


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def check_accounting(result):
    for c in result.classes.values():
        assert c.generated == c.duplicates + c.disagreements + c.low_confidence + c.surplus + c.kept


# ----------------------------------------------------------------------------- library, exact outputs


def test_exact_output_parsing_dedup_and_balancing(tmp_path, seeds):
    answers = {
        "finance": '1. "Pay rent tonight"\n2. pay rent tonight!\n3. Pay the credit card bill\n'
        "4. Buy index funds\n5. Sell the old car\n6. ok",
        "health": "- Refill the asthma inhaler at the pharmacy\n- Book a flu shot\n"
        "- refill the asthma inhaler at the pharmacy today\n",
    }
    gen = ScriptedGenerator(lambda prompt, call: answers[asked(prompt)])
    out = tmp_path / "syn.jsonl"
    result = augment(seeds=seeds, out=out, per_class=2, generator=gen, batch_size=2, progress=False)
    assert rows_of(out) == [
        {"text": "Pay rent tonight", "label": "finance"},
        {"text": "Buy index funds", "label": "finance"},
        {"text": "Refill the asthma inhaler at the pharmacy", "label": "health"},
        {"text": "Book a flu shot", "label": "health"},
    ]
    f, h = result.classes["finance"], result.classes["health"]
    # "ok" is too short; the copy of "pay rent tonight" and of the seed are duplicates; "Sell the old car" is surplus
    assert (f.generated, f.duplicates, f.surplus, f.kept) == (5, 2, 1, 2)
    assert (h.generated, h.duplicates, h.surplus, h.kept) == (3, 1, 0, 2)  # a near duplicate
    assert result.complete and result.rounds == 1 and gen.calls == 2
    assert read_labeled(out).counts() == {"finance": 2, "health": 2}  # what teacher label / distill read
    check_accounting(result)
    # what was parsed and not kept, duplicates aside, is transfer text: here the surplus
    assert transfer_path(out).read_text(encoding="utf-8") == "Sell the old car\n"
    assert result.transfer == str(transfer_path(out)) and result.transfer_texts == 1


def test_prompts_hold_the_class_and_its_seeds(tmp_path, seeds):
    gen = ScriptedGenerator(lambda prompt, call: "")
    augment(
        seeds=seeds,
        out=tmp_path / "o.jsonl",
        per_class=1,
        generator=gen,
        batch_size=4,
        shots=2,
        max_rounds=1,
        progress=False,
    )
    assert [asked(p) for p in gen.prompts] == ["finance", "health", "finance", "health"]
    finance = {r["text"] for r in SEEDS if r["label"] == "finance"}
    for prompt in gen.prompts[::2]:
        shown = re.findall(r"^- (.*)$", prompt, flags=re.M)
        assert len(shown) == 2 and set(shown) <= finance


def test_teacher_cleaning_drops_disagreements_and_low_confidence(tmp_path, seeds, trained_teacher):
    from mlx_edge.augment.clean import TeacherJudge
    from mlx_edge.augment.parse import parse_answer

    # The tiny teacher is right but barely sure (~0.51): take a threshold that drops a quarter of its finance calls.
    judge = TeacherJudge(trained_teacher, classes=["finance", "health"])
    texts = [t for call in range(8) for t in parse_answer(messy_answer('The class is "finance"', call))[:3]]
    threshold = sorted(judge.judge(texts)[1])[len(texts) // 4]
    out = tmp_path / "clean.jsonl"
    result = augment(
        seeds=seeds,
        out=out,
        per_class=6,
        generator=ScriptedGenerator(messy_answer),
        teacher=trained_teacher,
        min_confidence=threshold,
        batch_size=4,
        progress=False,
    )
    assert result.complete
    rows = rows_of(out)
    assert [r["label"] for r in rows].count("finance") == 6 and len(rows) == 12
    labels, confidences = judge.judge([r["text"] for r in rows])
    assert labels == [r["label"] for r in rows] and min(confidences) >= threshold
    assert result.classes["finance"].low_confidence > 0
    t = result.total()  # every reject and the surplus is transfer text, once per time it was parsed
    rest = transfer_path(out).read_text(encoding="utf-8").splitlines()
    assert len(rest) == t.disagreements + t.low_confidence + t.surplus == result.transfer_texts
    assert not {r["text"] for r in rows} & set(rest) and " ".join(WORDS["health"]) in rest  # the off-class line
    for _name, c in result.classes.items():
        assert c.disagreements >= 1  # every answer has the same off-class line (then a duplicate)
        assert c.duplicates >= result.rounds  # ... and a seed copy
    check_accounting(result)
    deduper = Deduper(0.8)
    for r in SEEDS:
        deduper.add(r["text"], seed=True)
    for row in rows:
        assert deduper.check(row["text"]) is None
        deduper.add(row["text"])


def test_relabel_keeps_disagreements_under_the_teachers_label(tmp_path, seeds, trained_teacher):
    def health_only(prompt, call):
        return (
            f"{' '.join(WORDS['health'][call % 4 :] + WORDS['health'][: call % 4])}\n"
            if asked(prompt) == "finance"
            else ""
        )

    out = tmp_path / "re.jsonl"
    result = augment(
        seeds=seeds,
        out=out,
        per_class=2,
        generator=ScriptedGenerator(health_only),
        batch_size=2,
        teacher=trained_teacher,
        relabel=True,
        max_rounds=6,
        progress=False,
    )
    assert {r["label"] for r in rows_of(out)} == {"health"}
    assert result.classes["finance"].disagreements >= 1 and result.classes["health"].kept >= 1
    assert result.short == ["finance"] + (["health"] if result.classes["health"].kept < 2 else [])


# ------------------------------------------------------------------------------------------ resume


def test_resume_continues_without_redoing_rounds_and_cuts_a_torn_append(tmp_path, seeds):
    kwargs = dict(seeds=seeds, per_class=8, batch_size=2, per_prompt=5, progress=False)
    whole = tmp_path / "whole.jsonl"
    full = ScriptedGenerator(messy_answer)
    expected = augment(out=whole, generator=full, **kwargs)

    out = tmp_path / "part.jsonl"

    def stop_after_two(number, kept):
        if number == 1:
            raise KeyboardInterrupt

    first = ScriptedGenerator(messy_answer)
    with pytest.raises(KeyboardInterrupt):
        augment(out=out, generator=first, on_round=stop_after_two, **kwargs)
    assert first.calls == 4 and len(rows_of(out)) > 0
    with open(out, "a", encoding="utf-8") as f:  # a crash in the middle of the next append
        f.write('{"text": "half a li')
    with open(transfer_path(out), "a", encoding="utf-8") as f:
        f.write("half a transfer li")
    second = ScriptedGenerator(lambda prompt, call: messy_answer(prompt, call + 4))
    result = augment(out=out, generator=second, **kwargs)
    assert result.resumed and second.calls == full.calls - 4
    assert rows_of(out) == rows_of(whole)
    assert transfer_path(out).read_text(encoding="utf-8") == transfer_path(whole).read_text(encoding="utf-8") != ""
    assert {c: vars(v) for c, v in result.classes.items()} == {c: vars(v) for c, v in expected.classes.items()}
    again = ScriptedGenerator(messy_answer)
    done = augment(out=out, generator=again, **kwargs)
    assert again.calls == 0 and done.new_examples == 0 and done.complete


def test_other_settings_are_refused_unless_forced(tmp_path, seeds):
    out = tmp_path / "o.jsonl"
    augment(seeds=seeds, out=out, per_class=2, generator=ScriptedGenerator(messy_answer), progress=False)
    with pytest.raises(AugmentError, match=r"other settings \(differs in: temperature\)"):
        augment(
            seeds=seeds,
            out=out,
            per_class=2,
            generator=ScriptedGenerator(messy_answer),
            temperature=0.1,
            progress=False,
        )
    result = augment(
        seeds=seeds, out=out, per_class=1, generator=ScriptedGenerator(messy_answer), force=True, progress=False
    )
    assert len(rows_of(out)) == 2 and not result.resumed


# ------------------------------------------------------------------------------------------- fallback


def test_token_edits_without_an_llm_feed_the_teacher_filter(tmp_path, seeds, trained_teacher):
    out = tmp_path / "edits.jsonl"
    result = augment(seeds=seeds, out=out, per_class=5, teacher=trained_teacher, progress=False)
    assert result.method == "edits" and result.complete
    rows = rows_of(out)
    assert len(rows) == 10 and not {r["text"] for r in rows} & {r["text"] for r in SEEDS}
    assert json.loads((tmp_path / "edits.jsonl.manifest.json").read_text())["setup"]["prompt_template"] is None
    from mlx_edge.teacher.label import label_targets

    # the output is a data file like any other: `teacher label --data seeds --data synthetic` reads it
    labeled = label_targets(
        teacher=trained_teacher,
        data=[seeds, out],
        out=tmp_path / "targets",
        backend="mlx",
        device="cpu",
        progress=False,
    )
    assert labeled.examples == len(SEEDS) + 10


# ------------------------------------------------------------------------------------------------ CLI


def run_cli(*args):
    return CliRunner().invoke(main, ["augment", *map(str, args)])


def test_cli_with_a_real_tiny_mlx_lm_model(tmp_path, seeds, tiny_llm, monkeypatch):
    out = tmp_path / "syn.jsonl"
    args = [
        "--seeds",
        seeds,
        "--llm",
        tiny_llm,
        "--per-class",
        3,
        "--out",
        out,
        "--max-rounds",
        2,
        "--batch-size",
        2,
        "--max-tokens",
        24,
        "--min-chars",
        1,
        "--seed",
        7,
        "--temperature",
        0.9,
        "--top-p",
        0.9,
        "--json",
        "--quiet",
    ]
    answers = []
    real_generate = MlxLmGenerator.generate

    def spy(self, prompts, **kwargs):
        answers.extend(real_generate(self, prompts, **kwargs))
        return answers[-len(prompts) :]

    monkeypatch.setattr(MlxLmGenerator, "generate", spy)
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["rounds"] == 2 and report["method"] == "llm"
    assert len(answers) == 4 and all(isinstance(a, str) and a for a in answers)  # random weights: gibberish
    parsed = [parse_answer(a, min_chars=1) for a in answers]
    assert sum(c["generated"] for c in report["classes"].values()) == sum(map(len, parsed))
    manifest = json.loads((tmp_path / "syn.jsonl.manifest.json").read_text())
    setup = manifest["setup"]
    assert setup["llm"] == str(tiny_llm) and "{label}" in setup["prompt_template"]
    assert (setup["seed"], setup["max_tokens"], setup["temperature"], setup["top_p"]) == (7, 24, 0.9, 0.9)
    assert manifest["chat_template"] is True and manifest["versions"]["mlx"]
    kept = rows_of(out)
    assert len(kept) == sum(c["kept"] for c in report["classes"].values())
    assert all(set(r) == {"text", "label"} and r["label"] in ("finance", "health") for r in kept)
    # the same command again: nothing left to do within --max-rounds, nothing regenerated
    again = run_cli(*args)
    assert again.exit_code == 0 and json.loads(again.output)["new_examples"] == 0


def test_cli_report_with_teacher_and_resume(tmp_path, seeds, trained_teacher, monkeypatch):
    """The CLI path with exact generator outputs: the loader is swapped for a scripted generator."""
    made = []

    def fake_loader(llm):
        made.append(ScriptedGenerator(messy_answer, name=llm))
        return made[-1]

    monkeypatch.setattr("mlx_edge.augment.api.load_generator", fake_loader)
    monkeypatch.setattr("mlx_edge.augment.api.check_llm", lambda llm: None)
    out = tmp_path / "syn.jsonl"
    args = [
        "--seeds",
        seeds,
        "--llm",
        "scripted",
        "--per-class",
        4,
        "--out",
        out,
        "--teacher",
        trained_teacher,
        "--min-confidence",
        0.5,
        "--batch-size",
        2,
        "--quiet",
    ]
    result = run_cli(*args, "--max-rounds", 1)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["class", *(c.replace("_", "-") for c in COLUMNS)]
    assert [line.split()[0] for line in lines[1:4]] == ["finance", "health", "total"]
    assert "in 1 rounds" in lines[4]
    resumed = run_cli(*args, "--max-rounds", 10)
    assert resumed.exit_code == 0, resumed.output
    rounds = json.loads((tmp_path / "syn.jsonl.state.json").read_text())["round"]
    assert "(resumed)" in resumed.output and made[1].calls == 2 * (rounds - 1)  # round 1 was not redone
    assert read_labeled(out).counts() == {"finance": 4, "health": 4}


# ----------------------------------------------------------------------------------------- bad inputs


def test_llm_directory_that_is_not_a_model(tmp_path, seeds):
    (tmp_path / "notamodel").mkdir()
    assert_one_line_error(
        run_cli("--seeds", seeds, "--llm", tmp_path / "notamodel", "--per-class", 2, "--out", tmp_path / "o.jsonl"),
        "not a language model directory (no config.json)",
    )
    assert not (tmp_path / "o.jsonl").exists()  # nothing written before the check
    (tmp_path / "notamodel" / "config.json").write_text('{"model_type": "qwen2"}')
    assert_one_line_error(
        run_cli("--seeds", seeds, "--llm", tmp_path / "notamodel", "--per-class", 2, "--out", tmp_path / "o.jsonl"),
        "has no *.safetensors weights",
    )


def test_class_without_seed_examples(tmp_path, seeds):
    line = assert_one_line_error(
        run_cli("--seeds", seeds, "--classes", "finance,travel", "--per-class", 2, "--out", tmp_path / "o.jsonl"),
        "class 'travel' has no examples in",
        "classes there: finance, health",
    )
    assert "leave it out of --classes" in line
    (tmp_path / "empty.jsonl").write_text('{"text": "pay", "label": "finance"}\n{"text": " ", "label": "health"}\n')
    assert_one_line_error(
        run_cli("--seeds", tmp_path / "empty.jsonl", "--per-class", 2, "--out", tmp_path / "o.jsonl"),
        "line 2: empty text",
    )


def test_unwritable_output_path(tmp_path, seeds):
    (tmp_path / "afile").write_text("x")
    assert_one_line_error(
        run_cli("--seeds", seeds, "--per-class", 2, "--out", tmp_path / "afile" / "o.jsonl"),
        "cannot write",
        "choose a writable --out",
    )
    assert_one_line_error(run_cli("--seeds", seeds, "--per-class", 2, "--out", tmp_path), "is a directory")


def test_output_of_something_else_is_not_overwritten(tmp_path, seeds):
    (tmp_path / "mine.jsonl").write_text('{"text": "precious", "label": "x"}\n')
    assert_one_line_error(
        run_cli("--seeds", seeds, "--per-class", 2, "--out", tmp_path / "mine.jsonl"),
        "was not written by mlx-edge augment",
        "--force",
    )
    assert "precious" in (tmp_path / "mine.jsonl").read_text()
