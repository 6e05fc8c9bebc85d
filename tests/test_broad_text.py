"""Broad English text for the transfer set: WordNet 3.0's example sentences (mlx_edge/datasets/wordnet),
`[data] broad_text = N` in a run config."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.datasets import WORDNET_EXAMPLES, WORDNET_SENTENCES, broad_english
from tests.helpers.cli import assert_one_line_error


def test_the_shipped_sentences_are_what_the_maker_keeps():
    """Every line is one sentence of four words or more, each once, and the count is the one the
    config's bound uses; any first N are a prefix of the same shuffle."""
    lines = WORDNET_EXAMPLES.read_text(encoding="utf-8").splitlines()
    assert len(lines) == WORDNET_SENTENCES
    assert len(set(lines)) == len(lines)
    assert all(len(line.split()) >= 4 and line == " ".join(line.split()) for line in lines)
    assert broad_english(25) == lines[:25] and broad_english(0) == []
    assert (WORDNET_EXAMPLES.parent / "LICENSE").read_text(encoding="utf-8").count("Princeton University") >= 2
    with pytest.raises(ValueError, match="0 to 34761"):
        broad_english(WORDNET_SENTENCES + 1)


def test_a_run_adds_the_sentences_to_the_transfer_set(base_dir, toy_data, tmp_path):
    from mlx_edge.manifest import read_manifest
    from tests.helpers.pipeline import run_stages, write_config

    config = write_config(tmp_path, base_dir, toy_data, bundles=("fp16", "int8"), data={"broad_text": 40})
    stages = [s["name"] for s in run_stages(config)]
    work = tmp_path / "work"
    written = [json.loads(line)["text"] for line in (work / "broad.jsonl").read_text().splitlines()]
    assert written == broad_english(40)
    assert read_manifest(work / "student")["report"]["transfer_rows"] == 40  # none equals a labeled/dev text
    # the split student's fine-tune reads the labeled rows only: the words were learned by the student it splits
    assert read_manifest(work / "student-int8")["report"]["transfer_rows"] == 0
    assert stages.index("teacher") < stages.index("broad") < stages.index("label")
    ran = [s["name"] for s in run_stages(config) if s["status"] == "ran"]  # up to date: nothing reruns
    assert not {"broad", "label", "distill"} & set(ran)


def _rows(path, texts):
    path.write_text("".join(json.dumps({"text": t, "label": f"l{i % 2}"}) + "\n" for i, t in enumerate(texts)))
    return path


def test_auto_adds_broad_text_to_a_few_thousand_english_rows(tmp_path):
    """broad_text auto: 10,000 under 5,000 rows when a tenth of them are English, with a transfer set or
    as one of its own; 0 at 5,000 rows or on Chinese text. teacher_edits auto: 20 per row under 1,000 rows
    with no unlabeled files; 0 with unlabeled files or at 1,000 rows. A number is taken as given."""
    from mlx_edge.pipeline import PipelineConfig, transfer_counts
    from mlx_edge.settings import BROAD_TEXT, BROAD_TEXT_BELOW, TEACHER_EDITS

    notes = tmp_path / "notes.txt"
    notes.write_text("a note\n")
    english = _rows(tmp_path / "en.jsonl", [f"pay the bill number {i}" for i in range(999)])
    many = _rows(tmp_path / "many.jsonl", [f"pay the bill number {i}" for i in range(1000)])
    thousands = _rows(tmp_path / "4999.jsonl", [f"pay the bill number {i}" for i in range(4999)])
    too_many = _rows(tmp_path / "5000.jsonl", [f"pay the bill number {i}" for i in range(5000)])
    mixed = _rows(tmp_path / "mixed.jsonl", [f"交房租 {i}" for i in range(90)] + [f"pay rent {i}" for i in range(10)])
    chinese = _rows(tmp_path / "zh.jsonl", [f"交房租 {i}" for i in range(91)] + [f"pay rent {i}" for i in range(9)])
    chinese_digits = _rows(tmp_path / "zh2.jsonl", [f"交房租 {i}" for i in range(90)] + [f"{i}" for i in range(10)])

    def counts(train, **kw):
        return transfer_counts(PipelineConfig(out=tmp_path / "w", train=train, **kw))

    assert (BROAD_TEXT, BROAD_TEXT_BELOW, TEACHER_EDITS) == (10_000, 5_000, 20)
    assert counts(english) == (TEACHER_EDITS, BROAD_TEXT)  # the defaults: edits make a transfer set, broad joins
    assert counts(english, unlabeled=(notes,)) == (0, BROAD_TEXT)  # the user's text instead of edits
    assert counts(english, teacher_edits=2) == (2, BROAD_TEXT)
    assert counts(mixed, unlabeled=(notes,)) == (0, BROAD_TEXT)  # 10 of 100 English
    assert counts(english, teacher_edits=0) == (0, BROAD_TEXT)  # no other transfer set: broad text is one
    assert counts(many) == counts(thousands) == (0, BROAD_TEXT)  # no edits from 1,000 rows; broad text alone
    assert counts(many, unlabeled=(notes,)) == counts(thousands, unlabeled=(notes,)) == (0, BROAD_TEXT)
    assert counts(too_many) == counts(too_many, unlabeled=(notes,)) == (0, 0)
    assert counts(mixed) == (TEACHER_EDITS, BROAD_TEXT)
    assert counts(chinese) == (TEACHER_EDITS, 0)  # 9 of 100 English: edits only
    assert counts(chinese, unlabeled=(notes,)) == (0, 0)
    assert counts(chinese_digits, unlabeled=(notes,)) == (0, 0)  # no CJK but no letters either
    assert counts(english, unlabeled=(notes,), broad_text=0) == (0, 0)
    assert counts(chinese, teacher_edits=5, broad_text=123) == (5, 123)
    # Latin letters in another language: French rows get edits, not English sentences
    french = _rows(tmp_path / "fr.jsonl", [f"Prendre rendez-vous chez le dentiste lundi {i}" for i in range(100)])
    assert counts(french) == (TEACHER_EDITS, 0)


def test_english_rows_tells_english_from_other_latin_languages():
    """The rows' words, pooled, against WordNet's 1,000 most common ones: the shipped to-do set's English
    half and written French, Spanish, German and Italian sets (not from any model or the code)."""
    from mlx_edge.data import english_rows, is_latin
    from mlx_edge.datasets import todo_split

    todo = [json.loads(line)["text"] for line in todo_split("train").read_text(encoding="utf-8").splitlines()]
    assert english_rows(todo) == sum(map(is_latin, todo)) == 1485  # every Latin row
    written = {
        "fr": [
            "Acheter du pain et du lait pour demain matin",
            "Payer la facture d'électricité avant vendredi",
            "Le service était lent et la nourriture froide",
            "Réserver un hôtel à Lyon pour le week-end",
        ],
        "es": [
            "Comprar pan y leche para mañana",
            "Llamar al médico para pedir cita",
            "La comida estaba fría y el servicio fue lento",
            "Reservar un vuelo a Madrid",
        ],
        "de": [
            "Zahnarzttermin für Montag vereinbaren",
            "Die Stromrechnung bis Freitag bezahlen",
            "Das Essen war kalt und der Service langsam",
            "Für die Prüfung lernen",
        ],
        "it": [
            "Pagare la bolletta della luce entro venerdì",
            "Prenotare un volo per Roma",
            "Il cibo era freddo e il servizio lento",
            "Studiare per l'esame di storia",
        ],
    }
    for language, texts in written.items():
        assert english_rows(texts) == 0, language
    assert english_rows(["Book a dentist appointment", "复习线性代数", "2024"]) == 1
    assert english_rows([]) == 0 and english_rows(["复习线性代数"]) == 0


@pytest.mark.parametrize("value", [-1, "many", True, 2.5, WORDNET_SENTENCES + 1])
def test_a_bad_count_is_one_line_before_any_stage(base_dir, toy_data, tmp_path, value):
    from tests.helpers.pipeline import write_config

    config = write_config(tmp_path, base_dir, toy_data, data={"broad_text": value})
    assert_one_line_error(
        CliRunner().invoke(main, ["run", str(config), "--quiet"]), '[data] broad_text must be "auto" or a whole number'
    )
    assert not (tmp_path / "work").exists()


def test_the_demo_learns_from_broad_text_and_a_sample_of_it_does_not(tmp_path):
    """The demo's 3,000 rows (about half English) get broad text and no edits, and distill them under
    BROAD_STEP_BUDGET (3 epochs); `demo --limit` (and bench's pipeline row, which times the demo's stages
    on such a sample) must not add edits and broad text to a quick look."""
    from mlx_edge.demo import demo_config
    from mlx_edge.pipeline import distill_settings, transfer_counts
    from mlx_edge.settings import BROAD_STEP_BUDGET, BROAD_TEXT

    full = demo_config(out=tmp_path / "full")
    assert (full.teacher_edits, full.broad_text) == ("auto", "auto") and transfer_counts(full) == (0, BROAD_TEXT)
    assert distill_settings(full, *transfer_counts(full)).step_budget == BROAD_STEP_BUDGET == 1200
    sample = demo_config(out=tmp_path / "sample", limit=50)
    assert transfer_counts(sample) == (0, 0)
    sample.teacher_edits = sample.broad_text = "auto"  # what the sample's 50 rows would get without the pin
    assert transfer_counts(sample)[0] > 0
