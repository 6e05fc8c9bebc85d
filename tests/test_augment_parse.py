"""Prompt builder, answer parser, dedup and token edits of `mlx-edge augment`: pure Python, no model."""

from __future__ import annotations

import random

import pytest

from mlx_edge.augment.dedup import Deduper, jaccard, normalize, shingles
from mlx_edge.augment.fallback import detokenize, propose_edits, tokens
from mlx_edge.augment.parse import parse_answer
from mlx_edge.augment.prompt import PROMPT_TEMPLATE, build_prompt, language_hint, pick_shots

# ------------------------------------------------------------------------------------------ prompt


def test_prompt_names_the_class_shows_the_seeds_and_asks_for_a_count():
    prompt = build_prompt("finance", ["Pay the  credit card\nbill", "Transfer rent"], 7)
    assert 'The class is "finance"' in prompt
    assert "- Pay the credit card bill\n- Transfer rent\n" in prompt  # whitespace folded: one seed per line
    assert "Write 7 new examples" in prompt and "one example per line" in prompt
    assert "same language and style" in prompt
    assert "Chinese" not in prompt


def test_prompt_language_hint():
    assert language_hint(["交房租和水电费", "还信用卡"]) == " Write them in Chinese."
    assert "Mix languages" in language_hint(["交房租", "pay the bill"])
    assert language_hint(["pay the bill"]) == ""
    assert "Write them in Chinese." in build_prompt("生活", ["买菜", "交房租"], 3)


def test_template_is_stable_and_shots_vary_with_the_rng():
    assert "{label}" in PROMPT_TEMPLATE and "{examples}" in PROMPT_TEMPLATE
    seeds = [f"s{i}" for i in range(20)]
    a, b = pick_shots(seeds, 5, random.Random("0:0")), pick_shots(seeds, 5, random.Random("0:1"))
    assert len(a) == 5 and a != b and a == pick_shots(seeds, 5, random.Random("0:0"))
    assert sorted(pick_shots(seeds[:2], 5, random.Random(0))) == ["s0", "s1"]


# ------------------------------------------------------------------------------------------- parse


def test_numbered_list_with_preamble_quotes_and_closing():
    answer = """Sure! Here are 5 new examples of the class "finance":

1. "Pay the electricity bill before Monday"
2) 'Transfer 200 to savings'
(3) “Check the credit card statement”
4: **Cancel the gym membership refund**
5、「还信用卡账单」

I hope these help!"""
    assert parse_answer(answer, label="finance") == [
        "Pay the electricity bill before Monday",
        "Transfer 200 to savings",
        "Check the credit card statement",
        "Cancel the gym membership refund",
        "还信用卡账单",
    ]


def test_bullets_examples_labels_and_empty_lines():
    answer = "- Book a flu shot\n\n* Refill the inhaler (health)\n• Example 3: run 5km - health\n   \n-\n"
    assert parse_answer(answer, label="health") == ["Book a flu shot", "Refill the inhaler", "run 5km"]


def test_json_array_of_strings_or_objects_in_a_code_fence():
    assert parse_answer('```json\n["Pay rent", "交水电费"]\n```') == ["Pay rent", "交水电费"]
    assert parse_answer('[{"text": "Pay rent", "label": "finance"}, {"example": "Buy bonds"}, 3]') == [
        "Pay rent",
        "Buy bonds",
    ]


def test_json_lines_survive_a_line_cut_by_max_tokens():
    answer = '{"text": "Pay rent"}\n{"text": "明天交房租", "label": "finance"},\n{"text": "Buy st'
    assert parse_answer(answer) == ["Pay rent", "明天交房租"]


def test_mixed_languages_and_chinese_numbering():
    answer = "以下是5个新的例子：\n1. 明天 review 一下预算表\n2．Pay 房租 tonight\n例3：交物业费\n"
    assert parse_answer(answer) == ["明天 review 一下预算表", "Pay 房租 tonight", "交物业费"]


def test_too_short_too_long_and_broken_characters_are_dropped():
    answer = "1. ok\n2. " + "x" * 400 + "\n3. Pay the phone bill\n4. 交房\ufffd\n"
    assert parse_answer(answer, min_chars=3, max_chars=300) == ["Pay the phone bill"]
    assert parse_answer("", label="a") == [] and parse_answer("\n\n  \n") == []


def test_broken_json_array_falls_back_to_lines():
    assert parse_answer('["Pay rent", "Buy') == ['["Pay rent", "Buy']  # not JSON: kept as a line, harmless


# ------------------------------------------------------------------------------------------- dedup


def test_normalize_ignores_case_punctuation_width_and_spaces():
    assert normalize("  Pay the BILL!! ") == normalize("pay the bill") == "pay the bill"
    assert normalize("交房租，ＡＢＣ") == normalize("交房租 abc")


def test_chinese_uses_character_bigrams():
    assert shingles("交房租") == frozenset({"交房", "房租"})
    assert jaccard(shingles("明天交房租和水电费"), shingles("明天交房租和水电费吧")) >= 0.8
    assert jaccard(shingles("明天交房租"), shingles("复习线性代数")) == 0.0


def test_deduper_exact_near_and_seed_copies():
    d = Deduper(0.8)
    d.add("Pay the credit card bill", seed=True)
    d.add("Transfer money to the savings account today")
    assert d.check("pay the credit card bill!") == "seed_copy"
    assert d.check("Transfer money to the savings account today please") == "duplicate"  # near
    assert d.check("Book a dentist appointment") is None
    exact_only = Deduper(1.0)
    exact_only.add("Transfer money to the savings account today")
    assert exact_only.check("Transfer money to the savings account today please") is None


def test_edits_mode_keeps_near_copies_of_seeds_but_not_exact_ones():
    d = Deduper(0.5, near_seeds=False)
    d.add("pay the credit card bill now", seed=True)
    assert d.check("pay the credit card bill") is None
    assert d.check("Pay the credit card bill now.") == "seed_copy"


# ---------------------------------------------------------------------------------------- fallback


def test_tokens_split_chinese_characters_and_detokenize_round_trips():
    text = "明天 review 一下 PR"
    assert tokens(text) == ["明", "天", "review", "一", "下", "PR"]
    assert detokenize(tokens(text)) == "明天review一下PR"  # spaces next to CJK are not kept
    assert detokenize(tokens("pay the bill")) == "pay the bill"


@pytest.mark.parametrize("seeds", [["pay the credit card bill", "transfer rent"], ["交房租和水电费", "还信用卡"]])
def test_edits_are_seeded_and_use_the_class_vocabulary(seeds):
    a = propose_edits(seeds, 20, random.Random(1))
    assert a == propose_edits(seeds, 20, random.Random(1)) and len(a) == 20
    vocab = {t for s in seeds for t in tokens(s)}
    assert all(set(tokens(t)) <= vocab for t in a)
    assert any(t not in seeds for t in a)
