"""Text generators: the local LLM through mlx-lm, and a scripted one for tests.

A generator answers a list of prompts (user messages) with a list of texts, one per prompt, and
counts the tokens it wrote in `tokens` (what the augment report's tokens/s is made of).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from mlx_edge.errors import ModelError
from mlx_edge.models.builtin_llm import BUILTIN_LLMS, check_builtin_llm, ensure_builtin_llm, is_builtin_llm
from mlx_edge.models.quantized import float_weight


class Generator(Protocol):
    name: str
    tokens: int  # written so far, over every call
    completion: bool  # a base model (no chat template): prompted with a list to continue, not an instruction

    def generate(
        self, prompts: list[str], *, max_tokens: int, temperature: float, top_p: float, seed: int
    ) -> list[str]: ...


class MlxLmGenerator:
    """A local mlx-lm model: chat template when the tokenizer has one, batched when mlx-lm can."""

    def __init__(self, model, tokenizer, name: str):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.chat_template = bool(getattr(tokenizer, "has_chat_template", False))
        self.tokens = 0
        self.weight_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))

    @property
    def completion(self) -> bool:
        """A base model: no chat template to wrap an instruction in, so it is given a list to continue."""
        return not self.chat_template

    def format(self, prompt: str) -> list[int]:
        if self.chat_template:
            messages = [{"role": "user", "content": prompt}]
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict):  # transformers 5 may return a BatchEncoding
                ids = ids["input_ids"]
            return list(ids)
        return list(self.tokenizer.encode(prompt))  # a list's start: the model writes the rest of its line

    def generate(
        self, prompts: list[str], *, max_tokens: int, temperature: float, top_p: float, seed: int
    ) -> list[str]:
        from mlx_lm.sample_utils import make_sampler  # lazy: mlx-lm is needed only when an LLM writes examples

        mx.random.seed(seed)
        sampler = make_sampler(temp=temperature, top_p=top_p)
        ids = [self.format(p) for p in prompts]
        try:
            from mlx_lm import batch_generate  # lazy: mlx-lm is needed only when an LLM writes examples
        except ImportError:  # an mlx-lm without batching: one prompt at a time
            batch_generate = None
        if batch_generate is not None and len(ids) > 1:
            response = batch_generate(
                self.model, self.tokenizer, ids, max_tokens=max_tokens, sampler=sampler, return_token_ids=True
            )
            self.tokens += sum(map(len, response.token_ids))
            return list(response.texts)
        from mlx_lm import stream_generate  # lazy: mlx-lm is needed only when an LLM writes examples

        texts = []
        for prompt in ids:
            text, last = "", None
            for last in stream_generate(self.model, self.tokenizer, prompt, max_tokens=max_tokens, sampler=sampler):
                text += last.text
            self.tokens += last.generation_tokens if last is not None else 0
            texts.append(text)
        return texts


class ScriptedGenerator:
    """Answers from a function of (prompt, call number): exact, repeatable outputs for tests."""

    def __init__(self, answer: Callable[[str, int], str], name: str = "scripted", *, completion: bool = False):
        self.answer, self.name, self.calls = answer, name, 0
        self.chat_template = False
        self.completion = completion
        self.tokens = 0
        self.prompts: list[str] = []
        self.max_tokens: list[int] = []  # each call's limit

    def generate(
        self, prompts: list[str], *, max_tokens: int, temperature: float, top_p: float, seed: int
    ) -> list[str]:
        self.max_tokens.append(max_tokens)
        out = []
        for prompt in prompts:
            out.append(self.answer(prompt, self.calls))
            self.tokens += len(out[-1].split())  # words stand in for tokens
            self.prompts.append(prompt)
            self.calls += 1
        return out


def is_local(llm: str) -> bool:
    """A path (exists, or looks like one) rather than a hub id such as mlx-community/NAME."""
    return Path(llm).expanduser().exists() or llm.startswith((".", "/", "~")) or llm.count("/") != 1


def check_llm(llm: str) -> None:
    """The cheap checks of a built-in name or a local LLM directory, done before anything is written."""
    if is_builtin_llm(llm):
        check_builtin_llm(llm)
    elif is_local(llm):
        _check_llm_dir(Path(llm).expanduser())


def resolve_llm(llm: str, *, progress: bool = True) -> str:
    """A built-in generator's name -> its converted directory (converted on first use); anything else unchanged."""
    return str(ensure_builtin_llm(llm, progress=progress)) if is_builtin_llm(llm) else llm


def load_generator(llm: str, *, adapter: Path | None = None) -> MlxLmGenerator:
    """An mlx-lm model from a built-in name (converted on first use), a local directory or a hub id
    (mlx-lm downloads and caches it), with the LoRA `adapter` directory applied when given."""
    return MlxLmGenerator(*load_llm(llm, adapter=adapter), llm)


def load_llm(llm: str, *, adapter: Path | None = None):
    """(model, tokenizer) of `llm` as `load_generator` names it, `adapter` applied (mlx-lm's own
    adapter loading). On the CPU a quantized model is unpacked to float32 once."""
    builtin = is_builtin_llm(llm)
    path = Path(resolve_llm(llm)).expanduser()
    local = builtin or is_local(llm)
    if local:
        _check_llm_dir(path)
    try:
        from mlx_lm import load  # lazy: mlx-lm is needed only when an LLM writes examples

        model, tokenizer = load(str(path) if local else llm, adapter_path=None if adapter is None else str(adapter))
    except Exception as exc:  # mlx-lm raises ValueError/FileNotFoundError/hub errors: all the user's to fix
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelError(
            f"cannot load the LLM {llm}: {first}",
            f"pass {' or '.join(BUILTIN_LLMS)} (built in), an mlx-lm model directory or a hub id, "
            "e.g. mlx-community/Qwen2.5-1.5B-Instruct-4bit",
        ) from None
    if mx.default_device() == mx.cpu:
        model = unpack_for_cpu(model)
    return model, tokenizer


def unpack_for_cpu(model):
    """Quantized layers -> float32 ones: MLX's CPU quantized matmul is ~10x slower than BLAS float32
    (SmolLM2-135M 4-bit: 12 vs 125 prompt tokens/s on 2 cores); weights take 4-8x the memory.
    Each weight is exact (models.quantized.float_weight)."""
    layers = []
    for name, module in model.named_modules():
        if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            weight = float_weight(module)
            if isinstance(module, nn.QuantizedLinear):
                plain = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
                if "bias" in module:
                    plain.bias = module.bias.astype(mx.float32)
            else:
                plain = nn.Embedding(*weight.shape)
            plain.weight = weight
            layers.append((name, plain))
    if layers:
        model.update_modules(tree_unflatten(layers))
        model.set_dtype(mx.float32)
        mx.eval(model.parameters())
    return model


def _check_llm_dir(path: Path) -> None:
    if not path.exists():
        raise ModelError(
            f"LLM directory {path} does not exist",
            "pass a local mlx-lm model directory, or a hub id like mlx-community/NAME",
        )
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ModelError(
            f"{path} is not a language model directory (no config.json)",
            "pass a directory made by mlx_lm.convert, or a hub id",
        )
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path / 'config.json'} is not valid JSON ({exc})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelError(f"{path / 'config.json'} has no model_type", "pass an mlx-lm model directory")
    if not any(path.glob("*.safetensors")):
        raise ModelError(f"{path} has no *.safetensors weights", "convert the model with mlx_lm.convert")
