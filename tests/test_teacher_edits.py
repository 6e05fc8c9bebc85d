"""Teacher-guided augmentation (augment/neighbours.py, `mlx-edge teacher edits`, `[data] teacher_edits`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import load_file, save_file

from mlx_edge.augment.neighbours import teacher_edits
from mlx_edge.cli import main
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.cli import assert_one_line_error
from tests.helpers.tiny import build_tiny_bert, build_tiny_unigram_bert

# each word's nearest whole word is its partner (the table below puts them 0.1 apart, all else orthogonal)
PARTNERS = [("pay", "bill"), ("the", "a"), ("book", "appointment"), ("dentist", "park"), ("credit", "card")]
HAN_PARTNERS = [("复", "习"), ("线", "性"), ("代", "数")]
TEXTS = ["pay the bill", "book a dentist", "credit card park appointment", "pay 5 times", "复习线性代数"]


@pytest.fixture(scope="module")
def paired_teacher(tmp_path_factory) -> Path:
    """The tiny WordPiece teacher with a word table where PARTNERS are each other's nearest neighbours."""
    directory = build_tiny_bert(tmp_path_factory.mktemp("paired"))
    tokenizer = load_tokenizer(directory)
    weights = load_file(directory / "model.safetensors")
    name = next(n for n in weights if n.endswith("word_embeddings.weight"))
    table = weights[name].copy()
    for axis, (a, b) in enumerate(PARTNERS + HAN_PARTNERS):
        for piece, lean in ((a, 0.0), (b, 0.1)):
            row = np.zeros(table.shape[1], np.float32)
            row[2 * axis], row[2 * axis + 1] = 1.0, lean
            table[tokenizer.token_id(piece)] = row
    save_file({**weights, name: table}, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def test_every_whole_word_swaps_for_its_nearest_of_the_same_script(paired_teacher):
    out = teacher_edits(paired_teacher, TEXTS, 3, rate=1.0, k=1)
    # k=1 and rate 1: one variant per text. Digits stay, and so does "times" (t ##i ##me ##s: not one piece)
    assert out == ["bill a pay", "appointment the park", "card credit dentist book", "bill 5 times", "习复性线数代"]


def test_at_most_per_text_sentences_each_new(paired_teacher):
    out = teacher_edits(paired_teacher, TEXTS, 4, rate=0.5, k=3, seed=1)
    sources = {" ".join(t.split()) for t in TEXTS}
    assert len(out) == len(set(out)) and not sources & set(out)
    assert 0 < len(out) <= 4 * len(TEXTS)
    assert out == teacher_edits(paired_teacher, TEXTS, 4, rate=0.5, k=3, seed=1)  # seeded
    assert out != teacher_edits(paired_teacher, TEXTS, 4, rate=0.5, k=3, seed=2)
    assert teacher_edits(paired_teacher, TEXTS, 0) == []


def test_chinese_pieces_also_swap_for_the_vocabularys_ideographs(paired_teacher, tmp_path):
    """han_vocab: a Chinese piece's candidates include the teacher vocabulary's ideographs that no text
    uses (a few hundred rows use a few hundred characters; the test sets use others). 租 is put nearer
    to 复 and 习 than they are to each other; it is in no text, so only the vocabulary brings it."""
    import shutil

    teacher = tmp_path / "t"
    shutil.copytree(paired_teacher, teacher)
    weights = load_file(teacher / "model.safetensors")
    name = next(n for n in weights if n.endswith("word_embeddings.weight"))
    table = weights[name].copy()
    tokenizer = load_tokenizer(teacher)
    axis = 2 * len(PARTNERS)  # 复 / 习's axes (HAN_PARTNERS[0])
    table[tokenizer.token_id("租")] = 0.0
    table[tokenizer.token_id("租"), axis : axis + 2] = (1.0, 0.05)
    save_file({**weights, name: table}, str(teacher / "model.safetensors"), metadata={"format": "pt"})
    texts = ["复习线性代数"]
    assert teacher_edits(teacher, texts, 1, rate=1.0, k=1, han_vocab=0) == ["习复性线数代"]
    assert teacher_edits(teacher, texts, 1, rate=1.0, k=1, han_vocab=1000) == ["租租性线数代"]
    latin = teacher_edits(teacher, TEXTS[:4], 1, rate=1.0, k=1, han_vocab=1000)  # Latin words: the rows' own only
    assert latin == ["bill a pay", "appointment the park", "card credit dentist book", "bill 5 times"]


def test_a_bad_edits_count_is_one_line_before_any_stage(base_dir, toy_data, tmp_path):
    from tests.helpers.pipeline import write_config

    for value in (-1, "many", True, 1001):
        config = write_config(tmp_path, base_dir, toy_data, data={"teacher_edits": value})
        result = CliRunner().invoke(main, ["run", str(config), "--quiet"])
        assert_one_line_error(result, '[data] teacher_edits must be "auto" or a whole number from 0 to 1000')
        assert not (tmp_path / "work").exists()


def test_unigram_pieces_inside_a_word_are_never_swapped(tmp_path):
    # the tiny Unigram vocabulary has word-initial pieces (▁de, ▁pa, ▁th) but almost no whole words:
    # swapping ▁de for ▁pa would turn "dentist" into "pantist"; Chinese pieces are words and do swap
    teacher = build_tiny_unigram_bert(tmp_path / "ug")
    texts = ["Book a dentist appointment", "Pay the credit card bill", "复习线性代数", "学习线性代数"]
    out = teacher_edits(teacher, texts, 10, seed=0)
    assert out
    latin = {w for t in texts[:2] for w in t.split()}
    for sentence in out:
        words = sentence.split()
        if all("\u4e00" <= ch <= "\u9fff" for ch in sentence):
            continue  # Chinese: the rows' characters or the vocabulary's (han_vocab)
        assert all(w in latin for w in words), sentence


def test_cli_writes_the_training_rows_edits_and_refuses_to_overwrite(trained_teacher, toy_data, tmp_path):
    train, dev = toy_data
    out = tmp_path / "edits.jsonl"
    args = ["teacher", "edits", "--teacher", str(trained_teacher), "--train", str(train), "--dev", str(dev)]
    result = CliRunner().invoke(main, [*args, "--per-text", "3", "--bags", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(set(r) == {"text"} and r["text"].strip() for r in rows)
    assert f"{len(rows)} sentences and 0 word bags from 240 training rows" in result.output
    with_bags = tmp_path / "bags.jsonl"
    result = CliRunner().invoke(main, [*args, "--per-text", "3", "--bags", "50", "--out", str(with_bags)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line)["text"] for line in with_bags.read_text().splitlines()]
    assert lines[: len(rows)] == [r["text"] for r in rows]  # the same edits, then the bags
    assert 40 <= len(lines) - len(rows) <= 50
    assert f"{len(rows)} sentences and {len(lines) - len(rows)} word bags from 240 training rows" in result.output
    again = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert_one_line_error(again, f"{out} exists", "--force")
    result = CliRunner().invoke(main, [*args, "--out", str(train), "--force"])
    assert result.exit_code != 0 and train.read_text().startswith("{")  # an input is never overwritten


def test_pipeline_adds_the_edits_to_the_transfer_set(base_dir, toy_data, tmp_path):
    from mlx_edge.manifest import read_manifest
    from mlx_edge.transfer import normalized
    from tests.helpers.pipeline import run_stages, write_config

    config = write_config(tmp_path, base_dir, toy_data, bundles=("fp16", "int8"), data={"teacher_edits": 2})
    stages = [s["name"] for s in run_stages(config)]
    work = tmp_path / "work"
    edits = [json.loads(line)["text"] for line in (work / "edits.jsonl").read_text().splitlines()]
    bags = [json.loads(line)["text"] for line in (work / "bags.jsonl").read_text().splitlines()]
    known = {normalized(json.loads(line)["text"]) for path in toy_data for line in path.read_text().splitlines()}
    fresh = len({normalized(t) for t in edits} - known)  # minus edits equal to a training, dev or test text
    assert 0 < fresh <= 2 * 240 and 900 <= len(bags) <= 1000  # 2 per row; 1,000 word bags (10,000 at 20 per row)
    assert read_manifest(work / "student")["report"]["transfer_rows"] == fresh + len(set(bags) - set(edits))
    # the split student's fine-tune skips the bags, as it skips broad text
    assert read_manifest(work / "student-int8")["report"]["transfer_rows"] == fresh
    assert stages.index("teacher") < stages.index("edits") < stages.index("label")
    ran = [s["name"] for s in run_stages(config) if s["status"] == "ran"]  # up to date: nothing reruns
    assert not {"edits", "label", "distill"} & set(ran)


def test_a_run_whose_transfer_set_is_its_edits_gets_the_step_budget(tmp_path):
    """Teacher edits are near-copies of the rows, learned in a few epochs: a run whose transfer set they
    make (no unlabeled files) distills under EDITS_STEP_BUDGET unless [distill] sets step_budget; a run
    with the user's text, or with no edits, has no cut; the `distill` command's default has none."""
    from mlx_edge.distill.loop import LoopConfig
    from mlx_edge.pipeline import PipelineConfig, distill_settings
    from mlx_edge.settings import BROAD_STEP_BUDGET, DISTILL, EDITS_STEP_BUDGET

    train, notes = tmp_path / "train.jsonl", tmp_path / "notes.txt"
    train.write_text(json.dumps({"text": "pay rent", "label": "a"}) + "\n")
    notes.write_text("a note\n")

    def budget(edits, broad=0, **kw):
        return distill_settings(PipelineConfig(out=tmp_path / "w", train=train, **kw), edits, broad).step_budget

    assert DISTILL.step_budget is None and LoopConfig.from_settings(DISTILL).step_budget == 0
    assert budget(20) == EDITS_STEP_BUDGET == 1500
    assert budget(20, unlabeled=(notes,)) is None  # real text keeps teaching past a few epochs
    assert budget(0) is None
    assert budget(20, 10_000) == EDITS_STEP_BUDGET  # broad text joining the edits: theirs
    assert budget(0, 10_000) == BROAD_STEP_BUDGET == 1200  # broad text alone: about 3 epochs of it
    assert budget(0, 10_000, unlabeled=(notes,)) is None
    assert budget(20, distill={"step_budget": 0}) == 0 and budget(20, distill={"step_budget": 900}) == 900
    assert budget(0, distill={"step_budget": 900}) == 900


def test_a_run_of_edits_and_a_blended_teacher_learns_at_the_lower_rate(tmp_path):
    """A teacher blended toward its probe (a few dozen labels) keeps mostly its pretrained layers, and a
    student cut from them that learns its edits at EDITS_LEARNING_RATE keeps more of what they knew,
    unless [distill] sets a rate. A teacher that is its fine-tune alone, a run with the user's text, with
    broad text alone or with no transfer set keep DISTILL_LEARNING_RATE, and so does the `distill`
    command (its option's default, and LoopConfig's when nothing sets one)."""
    from mlx_edge.distill.loop import LoopConfig
    from mlx_edge.pipeline import PipelineConfig, distill_settings, teacher_blend
    from mlx_edge.settings import DISTILL, DISTILL_LEARNING_RATE, EDITS_LEARNING_RATE, FEW_LABELS_BLEND

    train, notes = tmp_path / "train.jsonl", tmp_path / "notes.txt"
    train.write_text(json.dumps({"text": "pay rent", "label": "a"}) + "\n")
    notes.write_text("a note\n")

    def rate(edits, broad=0, blend=FEW_LABELS_BLEND, **kw):
        ds = distill_settings(PipelineConfig(out=tmp_path / "w", train=train, **kw), edits, broad, blend)
        return LoopConfig.from_settings(ds).learning_rate

    assert EDITS_LEARNING_RATE < DISTILL_LEARNING_RATE
    assert DISTILL.learning_rate is None and LoopConfig.from_settings(DISTILL).learning_rate == DISTILL_LEARNING_RATE
    assert rate(20) == rate(20, 10_000) == EDITS_LEARNING_RATE
    assert rate(20, blend=1.0) == DISTILL_LEARNING_RATE  # 300 rows: no gain measured
    assert rate(20, unlabeled=(notes,)) == rate(0, 10_000) == rate(0) == DISTILL_LEARNING_RATE
    assert rate(20, distill={"learning_rate": 3e-4}) == 3e-4 and rate(0, distill={"learning_rate": 5e-5}) == 5e-5
    # the blend as the teacher's manifest records it; a teacher whose manifest does not say is unblended
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    assert teacher_blend(teacher) == 1.0
    (teacher / "mlx_edge_manifest.json").write_text(json.dumps({"hyperparameters": {"blend": 0.25}}))
    assert teacher_blend(teacher) == 0.25
    (teacher / "mlx_edge_manifest.json").write_text(json.dumps({"hyperparameters": {"epochs": 2}}))
    assert teacher_blend(teacher) == 1.0
    distill_option = next(p for p in main.commands["distill"].params if p.name == "learning_rate")
    assert distill_option.default is None and f"[default: {DISTILL_LEARNING_RATE:g}]" in distill_option.help


# words WordNet's examples never use, so a bag's own words are told from its broad ones
ROWS = ["zorbix plimf quandle", "vexo zorbix", "复习线性代数", "привет мир"]
HAN_POOL = ["的", "在", "和"]


def test_word_bags_mix_a_rows_words_with_broad_words_of_its_script():
    from mlx_edge.augment.bags import HAN_PIECES, LATIN_WORDS, OWN_SHARE, _broad_words, word_bags

    bags = word_bags(ROWS, 600, han=HAN_POOL, seed=0)
    broad = set(_broad_words()[0])
    own_latin = {w for row in ROWS[:2] for w in row.split()}
    latin = [b for b in bags if b.isascii()]
    chinese = [b for b in bags if not b.isascii()]
    assert 140 <= len(latin) <= 300 and 140 <= len(chinese) <= 150  # 150 a row; the Cyrillic row gets none
    assert not set(bags) & set(ROWS) and len(set(bags)) == len(bags)
    words = [w for b in latin for w in b.split()]
    assert all(LATIN_WORDS[0] <= len(b.split()) <= LATIN_WORDS[1] for b in latin)
    assert all(w in own_latin or w in broad for w in words)
    own = sum(w in own_latin for w in words) / len(words)
    assert abs(own - OWN_SHARE) < 0.05, own  # the rest are WordNet's words
    assert all(
        HAN_PIECES[0] <= len(b) <= HAN_PIECES[1] and set(b) <= set("复习线性代数") | set(HAN_POOL) for b in chinese
    )
    assert any(set(b) & set(HAN_POOL) for b in chinese) and any(set(b) & set("复习线性代数") for b in chinese)
    assert bags == word_bags(ROWS, 600, han=HAN_POOL, seed=0) != word_bags(ROWS, 600, han=HAN_POOL, seed=1)


def test_word_bags_of_rows_in_another_latin_language_draw_on_the_rows_not_on_wordnet():
    from mlx_edge.augment.bags import OWN_SHARE, word_bags

    rows = ["zorbix plimf", "quandle vexo", "troumf"]
    words = {w for row in rows for w in row.split()}
    bags = word_bags(rows, 300, han=HAN_POOL, seed=0, english=False)
    assert len(bags) > 250 and all(set(b.split()) <= words for b in bags)  # no WordNet word
    third = [b.split() for b in bags[-100:]]  # the last row's bags: its own word, then the others'
    share = sum(w == "troumf" for b in third for w in b) / sum(map(len, third))
    assert OWN_SHARE < share < 0.6, share  # its own word plus its share of the pool (1 of 5 words)
    assert word_bags(rows, 300, han=HAN_POOL, seed=0) != bags  # English rows' pool: WordNet's words


def test_word_bags_count_and_the_rows_that_get_none():
    from mlx_edge.augment.bags import han_pieces, word_bags

    assert word_bags(ROWS, 0, han=HAN_POOL) == [] and word_bags([], 10, han=HAN_POOL) == []
    assert all(b.isascii() for b in word_bags(ROWS, 40, han=[]))  # no Chinese pool: the Chinese row gets none
    assert len(word_bags(ROWS[:1], 7, han=HAN_POOL)) == 7
    accented = " ".join(word_bags(["Café crème"], 30, han=[]))
    assert "café" in accented.split() or "crème" in accented.split()  # a Latin word keeps its accents
    assert "caf" not in accented.split() and "cr" not in accented.split()
    with pytest.raises(ValueError):
        word_bags(ROWS, -1, han=HAN_POOL)
    # the vocabulary's ideograph pieces in its order, word-start marks dropped, others skipped
    assert han_pieces(["<s>", "▁的", "a", "中国", "##在", "x的", "和"], 3) == ["的", "中国", "在"]
