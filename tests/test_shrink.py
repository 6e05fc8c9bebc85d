"""A narrower student cut from its teacher (distill/shrink.py) and extra likely vocabulary pieces (prune.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from mlx.utils import tree_flatten

from mlx_edge.cli import main
from mlx_edge.distill.shrink import ShrinkPlan, plan_shrink, selection_matrix, shrink_from_teacher
from mlx_edge.distill.student import init_student
from mlx_edge.errors import DistillError
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, init_weights
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.prune import _script, pieces, plan_vocab
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.cli import assert_one_line_error
from tests.helpers.tiny import CORPUS, build_tiny_bert, build_tiny_unigram_bert

CONFIG = BertConfig(
    vocab_size=60,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=40,
    id2label={0: "a", 1: "b", 2: "c"},
)


def _teacher(seed: int = 1) -> BertForSequenceClassification:
    model = BertForSequenceClassification(CONFIG, fast_math=False)
    init_weights(model, seed=seed)
    model.eval()
    return model


def _batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, CONFIG.vocab_size, (4, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    return ids, mask


def _logits(model, ids, mask) -> np.ndarray:
    return np.array(model(mx.array(ids), mx.array(mask)).logits)


def test_a_plan_that_keeps_everything_in_another_order_computes_the_teacher_exactly():
    # Every index the cut uses is exercised: a permuted residual stream, permuted dims inside each head
    # and permuted FFN neurons describe the same function, so any slicing mistake changes the logits.
    teacher, rng = _teacher(), np.random.default_rng(3)
    heads, dim = CONFIG.num_attention_heads, CONFIG.head_dim

    def per_head():
        return np.stack([rng.permutation(dim) for _ in range(heads)])

    plan = ShrinkPlan(
        layers=[0, 1, 2],
        channels=rng.permutation(CONFIG.hidden_size),
        qk=[per_head() for _ in range(3)],
        v=[per_head() for _ in range(3)],
        neurons=[rng.permutation(CONFIG.intermediate_size) for _ in range(3)],
    )
    student = BertForSequenceClassification(CONFIG, fast_math=False)
    shrink_from_teacher(student, teacher, plan)
    student.eval()
    ids, mask = _batch()
    np.testing.assert_allclose(_logits(student, ids, mask), _logits(teacher, ids, mask), atol=1e-5)
    # and the projection that undoes the channel order maps the student's hidden states onto the teacher's
    t_out = teacher(mx.array(ids), mx.array(mask), output_hidden_states=True).hidden_states[-1]
    s_out = student(mx.array(ids), mx.array(mask), output_hidden_states=True).hidden_states[-1]
    back = np.array(s_out) @ selection_matrix(plan.channels, CONFIG.hidden_size).T
    np.testing.assert_allclose(back, np.array(t_out), atol=1e-5)


def test_the_plan_cuts_dead_parts_first():
    teacher = _teacher()
    weights = dict(tree_flatten(teacher.parameters()))
    dead_channel, dead_neuron, dead_value = 5, 17, 2  # value dim 2 of head 1
    new = {}
    for name, value in weights.items():
        v = np.array(value)
        if name.startswith("bert.embeddings.") and "LayerNorm" not in name:
            v[..., dead_channel] = 0
        if "LayerNorm" in name:  # the channel's normalized output is exactly 0 everywhere
            v[dead_channel] = 0
        if name.endswith("intermediate.dense.weight"):
            v[dead_neuron] = 0
        if name.endswith("intermediate.dense.bias"):
            v[dead_neuron] = -30.0  # GELU(-30) == 0
        if "attention.self.value" in name:
            v[CONFIG.head_dim + dead_value] = 0
        new[name] = mx.array(v)
    teacher.load_weights(list(new.items()))
    narrow = replace(CONFIG, hidden_size=28, intermediate_size=60, num_hidden_layers=2)
    ids, mask = _batch()
    plan = plan_shrink(teacher, narrow, [0, 2], ids, mask)
    assert dead_channel not in plan.channels and len(plan.channels) == 28
    assert all(dead_neuron not in n and len(n) == 60 for n in plan.neurons)
    assert all(dead_value not in v[1] and v.shape == (4, narrow.head_dim) for v in plan.v)
    assert all(np.all(np.diff(v, axis=1) > 0) for v in plan.v)  # kept in their original order


def test_a_cut_student_starts_close_to_its_teacher(trained_teacher, toy_data):
    teacher = load_model(trained_teacher, require_head=True)
    teacher.eval()
    tokenizer = load_tokenizer(trained_teacher)
    texts = [json.loads(line)["text"] for line in toy_data[1].read_text().splitlines()]
    ids = tokenizer.encode_batch(texts, max_length=32)
    width = max(len(x) for x in ids)
    batch = np.full((len(ids), width), tokenizer.pad_id, np.int32)
    mask = np.zeros_like(batch)
    for i, x in enumerate(ids):
        batch[i, : len(x)], mask[i, : len(x)] = x, 1
    t = teacher.config
    narrow = replace(t, hidden_size=t.hidden_size - t.num_attention_heads, intermediate_size=t.intermediate_size - 8)
    plan = plan_shrink(teacher, narrow, list(range(t.num_hidden_layers)), batch, mask)
    cut = init_student(narrow, mode="teacher", teacher=teacher, shrink=plan)
    rand = init_student(narrow, mode="random", seed=0)
    # The fixture teacher separates the dev rows by logit margins of a few hundredths, so a cut that shifts every
    # margin by a constant flips the argmax of all rows at once (0.5 agreement in one CI run, 1.0 in the next):
    # the margins' correlation with the teacher's is what says the cut kept the teacher's function.
    want = _margins(_logits(teacher, batch, mask))
    close = {}
    for name, model in (("cut", cut), ("random", rand)):
        model.eval()
        close[name] = float(np.corrcoef(_margins(_logits(model, batch, mask)), want)[0, 1])
    assert close["cut"] >= 0.95 and abs(close["random"]) <= close["cut"] - 0.2, close  # random: 0.2 to 0.7 seen


def _margins(logits: np.ndarray) -> np.ndarray:
    return logits[:, 1] - logits[:, 0]


def test_a_student_with_other_heads_cannot_be_cut(trained_teacher, toy_data, tmp_path):
    config = tmp_path / "other.json"
    config.write_text(
        json.dumps({"num_hidden_layers": 1, "hidden_size": 24, "num_attention_heads": 3, "intermediate_size": 32})
    )
    result = CliRunner().invoke(
        main,
        ["distill", "--teacher", str(trained_teacher), "--train", str(toy_data[0]), "--student", str(config),
         "--init", "teacher", "--out", str(tmp_path / "s"), "--max-steps", "1", "--quiet"],
    )  # fmt: skip
    assert_one_line_error(result, "heads")
    with pytest.raises(DistillError, match="head count"):
        plan_shrink(_teacher(), replace(CONFIG, num_attention_heads=2), [0], *_batch())
    with pytest.raises(DistillError, match="one teacher layer"):
        plan_shrink(_teacher(), replace(CONFIG, hidden_size=28, num_hidden_layers=2), [0], *_batch())


def test_extra_pieces_are_the_most_likely_ones_in_the_data_scripts(tmp_path):
    directory = build_tiny_unigram_bert(tmp_path / "u")
    data = json.loads((directory / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    texts = [t for t in CORPUS if t.isascii()][:3]
    base = plan_vocab(directory, texts, "seen+script")
    more = plan_vocab(directory, texts, "seen+script", extra=5)
    added = sorted(set(more.keep.tolist()) - set(base.keep.tolist()))
    assert len(added) == 5 and more.to_dict()["extra"] == 5
    scripts = {_script(c) for t in texts for c in t if not c.isspace()}

    def in_scripts(i):
        text = vocab[i][0].replace("\u2581", "")
        return bool(text) and all(_script(c) in scripts for c in text)

    assert all(in_scripts(i) for i in added)
    left = [i for i in range(len(vocab)) if i not in set(more.keep.tolist()) and in_scripts(i)]
    assert left, "the toy vocabulary should have candidates left over"
    assert min(vocab[i][1] for i in added) >= max(vocab[i][1] for i in left)


def test_english_rows_share_of_extra_pieces_are_the_ones_english_text_uses_most(tmp_path):
    from collections import Counter

    from tokenizers import Tokenizer

    directory = build_tiny_unigram_bert(tmp_path / "u")
    table = pieces(json.loads((directory / "tokenizer.json").read_text()))
    scores = [score for _, score in json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]]
    texts = ["Pay the credit card bill", "复习线性代数第三章"]  # one English row of two: half the extra pieces
    reference = ["Renew the passport for Tokyo"] * 3 + ["Buy groceries for the week"]
    base = set(plan_vocab(directory, texts, "seen+script").keep.tolist())
    plan = plan_vocab(directory, texts, "seen+script", extra=6, reference=reference)
    added = set(plan.keep.tolist()) - base
    assert len(added) == 6 and plan.from_reference == 3 and plan.to_dict()["extra_from_english"] == 3
    scripts = {_script(c) for t in texts for c in t if not c.isspace()}

    def word(i):
        text = table[i].replace("\u2581", "")
        return bool(text) and all(_script(c) in scripts for c in text)

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    uses = Counter(i for encoding in tokenizer.encode_batch(reference) for i in encoding.ids)
    most_used = sorted((i for i in uses if i not in base and word(i)), key=lambda i: (-uses[i], i))[:3]
    assert len(most_used) == 3 and set(most_used) <= added
    rest = added - set(most_used)  # the other half: the likeliest pieces left, by score, as without reference
    left = [i for i in range(len(table)) if i not in base | added and word(i)]
    assert min(scores[i] for i in rest) >= max(scores[i] for i in left)
    # no English rows (or no reference): every extra piece by score, the same plan as before
    chinese = ["复习线性代数第三章", "交房租和水电费"]
    assert plan_vocab(directory, chinese, "seen+script", extra=6, reference=reference).from_reference == 0
    assert np.array_equal(
        plan_vocab(directory, chinese, "seen+script", extra=6, reference=reference).keep,
        plan_vocab(directory, chinese, "seen+script", extra=6).keep,
    )
    # French rows write Latin letters but are not English: no share by WordNet's use either
    french = ["Payer la facture de la carte", "Prendre rendez-vous chez le dentiste"]
    assert plan_vocab(directory, french, "seen+script", extra=6, reference=reference).from_reference == 0


def test_wordpiece_extra_pieces_follow_the_vocabulary_order(tmp_path):
    directory = build_tiny_bert(tmp_path / "w")
    texts = list(CORPUS[:3])
    base = set(plan_vocab(directory, texts, "seen").keep.tolist())
    added = sorted(set(plan_vocab(directory, texts, "seen", extra=4).keep.tolist()) - base)
    tokens = pieces(json.loads((directory / "tokenizer.json").read_text()))
    scripts = {_script(c) for t in texts for c in t if not c.isspace()}
    candidates = [
        i
        for i, token in enumerate(tokens)
        if i not in base and not token.startswith("[") and all(_script(c) in scripts for c in token.removeprefix("##"))
    ]
    assert added == candidates[:4]


@pytest.mark.parametrize("frozen", [True, False])
def test_frozen_embeddings_stay_the_teachers_rows(trained_teacher, toy_data, tmp_path, frozen):
    out = tmp_path / "s"
    args = ["distill", "--teacher", str(trained_teacher), "--train", str(toy_data[0]), "--dev", str(toy_data[1]),
            "--student", "half", "--init", "teacher", "--vocab", "all", "--learning-rate", "1e-2", "--max-steps", "3",
            "--out", str(out), "--quiet"]  # fmt: skip
    result = CliRunner().invoke(main, args + (["--freeze-embeddings"] if frozen else []))
    assert result.exit_code == 0, result.output
    name = "bert.embeddings.word_embeddings.weight"
    teacher = dict(tree_flatten(load_model(trained_teacher).parameters()))[name]
    student = dict(tree_flatten(load_model(out).parameters()))[name]
    assert mx.array_equal(student, teacher) == frozen


def test_a_whole_vocabulary_student_keeps_the_tokenizers_rows_of_a_padded_table(trained_teacher, toy_data, tmp_path):
    """multilingual-e5-small's word table has 35 rows past its tokenizer's pieces. A `--vocab all`
    student of such a teacher keeps the tokenizer's rows only, so its bundle's tokenizer and encoder
    agree and `check` passes (it refused the bundle when the student kept the padding rows)."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from mlx_edge.models.checkpoint import load_config

    teacher = tmp_path / "padded"
    shutil.copytree(trained_teacher, teacher)
    config = json.loads((teacher / "config.json").read_text())
    tokens = load_tokenizer(teacher).vocab_size
    assert config["vocab_size"] == tokens
    weights = load_file(teacher / "model.safetensors")
    name = next(k for k in weights if k.endswith("word_embeddings.weight"))
    weights[name] = np.concatenate([weights[name], np.zeros((5, weights[name].shape[1]), weights[name].dtype)])
    save_file(weights, teacher / "model.safetensors", metadata={"format": "pt"})
    (teacher / "config.json").write_text(json.dumps({**config, "vocab_size": tokens + 5}))
    assert load_config(teacher).vocab_size == tokens + 5

    out, bundle = tmp_path / "s", tmp_path / "b"
    args = ["distill", "--teacher", str(teacher), "--train", str(toy_data[0]), "--dev", str(toy_data[1]),
            "--student", "half", "--vocab", "all", "--max-steps", "2", "--out", str(out), "--quiet"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert load_config(out).vocab_size == load_tokenizer(out).vocab_size == tokens
    assert dict(tree_flatten(load_model(out).parameters()))[name].shape[0] == tokens

    exported = CliRunner().invoke(main, ["export", str(out), "--out", str(bundle), "--seq-len", "16", "--n-texts", "2"])
    assert exported.exit_code == 0, exported.output
    checked = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "2"])
    assert checked.exit_code == 0 and ", 0 failed" in checked.output, checked.output
