"""Hugging Face directories ⇄ the MLX BERT: strict on names and shapes, labels kept in config.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from mlx_edge.errors import ModelError
from mlx_edge.fileio import atomic_write_json, atomic_write_text
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, init_weights, sanitize
from mlx_edge.models.quantized import QuantSpec, dequantize_weights, quantize_layers, quantized_names
from mlx_edge.models.safetensors_io import WEIGHTS_NAME, read_weights, write_weights
from mlx_edge.models.static import StaticConfig, StaticModel, is_static, load_static

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
# A pretrained encoder without a task head (e.g. MiniLM) gets these freshly initialized.
HEAD_PREFIXES = ("classifier.",)


def read_config(model_dir: Path) -> dict:
    model_dir = Path(model_dir)
    if not model_dir.exists():
        raise ModelError(f"model directory {model_dir} does not exist", "pass a local Hugging Face model directory")
    if not model_dir.is_dir():
        raise ModelError(f"{model_dir} is a file, not a model directory", "pass the directory that holds config.json")
    path = model_dir / "config.json"
    if not path.is_file():
        raise ModelError(
            f"{model_dir} is not a model directory (no config.json)",
            "pass a Hugging Face model directory: config.json, model.safetensors, tokenizer files",
        )
    try:
        params = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path} is not valid JSON ({exc})", "re-save the model") from exc
    if not isinstance(params, dict):
        raise ModelError(f"{path} is not a JSON object", "re-save the model")
    return params


def load_config(model_dir: Path) -> BertConfig | StaticConfig:
    params = read_config(model_dir)
    return StaticConfig.from_dict(params) if is_static(params) else BertConfig.from_dict(params)


def load_model(
    model_dir: Path,
    *,
    labels: list[str] | None = None,
    seed: int = 0,
    dtype: mx.Dtype = mx.float32,
    require_head: bool = False,
) -> BertForSequenceClassification | StaticModel:
    """Load an HF BERT checkpoint into the MLX BERT, in eval mode (a static student's directory: its
    StaticModel, models/static.py).

    `labels`: the task's labels. A checkpoint with a trained head must have exactly these (in
    order); one without a head (a bare encoder) gets a new head for them, initialized with `seed`.
    """
    params = read_config(model_dir)
    if is_static(params):  # always has its head: distill writes it whole
        return load_static(Path(model_dir), params, labels=labels)
    config = BertConfig.from_dict(params)
    weights = sanitize(read_weights(model_dir))
    has_head = any(k.startswith(HEAD_PREFIXES) for k in weights)
    if require_head and not has_head:
        raise ModelError(
            f"{model_dir} is a bare encoder with no trained classifier head",
            "train one first (mlx-edge teacher train / distill) and pass that directory",
        )
    if labels is not None:
        if has_head and config.labels != list(labels):
            raise ModelError(
                f"the model's labels {config.labels} differ from the data's labels {list(labels)}",
                "train a head for these labels, or pass data with the model's labels",
            )
        config.id2label = dict(enumerate(labels))
    model = BertForSequenceClassification(config)
    init_weights(model, seed=seed)
    if config.quantization is not None:  # the layers the checkpoint holds as codes become MLX's quantized ones
        quantize_layers(model, QuantSpec.from_dict(config.quantization, f"{model_dir}"), quantized_names(weights))
    expected = dict(tree_flatten(model.parameters()))
    _check_names_and_shapes(expected, weights, model_dir, allow_missing=() if has_head else HEAD_PREFIXES)
    model.load_weights(list(weights.items()), strict=False)
    if dtype != mx.float32:
        model.set_dtype(dtype)
    model.eval()
    mx.eval(model.parameters())
    return model


def read_float_weights(model_dir: Path) -> dict[str, mx.array]:
    """The checkpoint's weights with HF names, a quantized one's dequantized (exactly scale * q + bias)."""
    weights = sanitize(read_weights(model_dir))
    quantization = read_config(model_dir).get("quantization")
    return weights if quantization is None else dequantize_weights(weights, QuantSpec.from_dict(quantization))


def _check_names_and_shapes(expected: dict, found: dict, model_dir: Path, allow_missing: tuple[str, ...]) -> None:
    missing = sorted(k for k in expected if k not in found and not k.startswith(allow_missing))
    unexpected = sorted(k for k in found if k not in expected)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} (e.g. {', '.join(missing[:3])})")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} (e.g. {', '.join(unexpected[:3])})")
        raise ModelError(
            f"{model_dir}: weights do not match a BERT with this config.json: {'; '.join(parts)}",
            "the checkpoint is not BERT-architecture or its config.json is wrong",
        )
    wrong = [
        f"{k} {tuple(found[k].shape)} != {tuple(v.shape)}"
        for k, v in expected.items()
        if k in found and tuple(found[k].shape) != tuple(v.shape)
    ]
    if wrong:
        raise ModelError(
            f"{model_dir}: {len(wrong)} weight shapes disagree with config.json (e.g. {wrong[0]})",
            "fix config.json or re-save the model",
        )


def save_model(model: BertForSequenceClassification, out_dir: Path, *, tokenizer_from: Path | None = None) -> Path:
    """Write config.json (with the label map), model.safetensors, and the tokenizer files."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(model.parameters()))
    write_weights(out_dir / WEIGHTS_NAME, weights)
    atomic_write_json(out_dir / "config.json", model.config.to_dict())
    if tokenizer_from is not None:
        copy_tokenizer_files(Path(tokenizer_from), out_dir)
    return out_dir


def copy_tokenizer_files(src: Path, dst: Path, *, unigram_spec: bool = False) -> list[str]:
    """Copy the tokenizer files; `dst` always ends up with a vocab.txt (the Swift tokenizer reads it),
    unless `unigram_spec`: then the app reads the spec beside them, and tokenizer.json is left out."""
    copied = []
    for name in TOKENIZER_FILES:
        if unigram_spec and name in ("tokenizer.json", "vocab.txt"):
            continue
        if (src / name).is_file() and (src.resolve() != dst.resolve()):
            shutil.copyfile(src / name, dst / name)
            copied.append(name)
    if not unigram_spec and ensure_vocab_txt(dst) and "vocab.txt" not in copied:
        copied.append("vocab.txt")
    return copied


def ensure_vocab_txt(directory: Path) -> bool:
    """Write vocab.txt from tokenizer.json's WordPiece vocabulary if it is missing.

    transformers 5 saves only tokenizer.json; vocab.txt (one token per line, id = line) is what
    BERT tooling and MLXEdgeKit's Swift tokenizer read. True when the directory has one afterwards.
    """
    directory = Path(directory)
    if (directory / "vocab.txt").is_file():
        return True
    path = directory / "tokenizer.json"
    if not path.is_file():
        return False
    model = json.loads(path.read_text(encoding="utf-8")).get("model", {})
    vocab = model.get("vocab")
    if model.get("type") != "WordPiece" or not isinstance(vocab, dict):
        return False
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ModelError(f"{path}: WordPiece ids are not 0..N-1", "re-save the tokenizer")

    atomic_write_text(directory / "vocab.txt", "".join(token + "\n" for token, _ in by_id))
    return True
