"""Where a teacher comes from: a local directory, a hub id or a built-in name, loaded safely with transformers."""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlx_edge.errors import ModelError
from mlx_edge.fileio import sha256_file
from mlx_edge.models.bert import BERT_LIKE_TYPES
from mlx_edge.models.builtin import resolve_model
from mlx_edge.models.checkpoint import read_config
from mlx_edge.models.tokenizer import load_tokenizer

# The files a tokenizer can be built from; without any, transformers makes a 5-token vocabulary.
TOKENIZER_SOURCES = ("tokenizer.json", "vocab.txt", "tokenizer.model", "sentencepiece.bpe.model", "spiece.model")


def is_local(model: str | Path) -> bool:
    text = str(model)
    return Path(text).expanduser().exists() or text.startswith((".", "/", "~")) or text.count("/") > 1


def check_local_model(model_dir: Path) -> dict:
    """The config of a local BERT-family model directory, or a ModelError saying what is wrong."""
    config = read_config(model_dir)
    if config.get("model_type") not in BERT_LIKE_TYPES:
        raise ModelError(
            f"{model_dir} holds a {config.get('model_type')!r} model, not a BERT-family encoder",
            "pass a BERT-family model such as bert-base-chinese, MiniLM or RoBERTa",
        )
    return config


def head_labels(config: dict) -> list[str] | None:
    """The labels of a trained classification head, or None for a bare encoder."""
    architectures = config.get("architectures") or []
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        return None
    id2label = config.get("id2label") or {}
    return [str(id2label[k]) for k in sorted(id2label, key=int)]


def has_trained_head(model: str | Path, labels: list[str]) -> bool:
    """Whether `model` (a directory or built-in name) is already a classifier for exactly `labels`: a
    teacher trained before, whose head (and pooling) training goes on from rather than replacing."""
    path = Path(resolve_model(str(model), progress=False)).expanduser()
    return path.is_dir() and head_labels(read_config(path)) == list(labels)


def transformers_progress(enabled: bool) -> None:
    """transformers draws its own bars (loading/writing weights): follow our --quiet."""
    from transformers.utils import logging  # lazy: transformers takes ~1 s to import; MLX teachers never need it

    # A new head on a pretrained encoder is the point of fine-tuning: no "newly initialized" report.
    logging.set_verbosity_error()
    if enabled:
        logging.enable_progress_bar()
    else:
        logging.disable_progress_bar()


def load_for_training(
    model: str,
    labels: list[str],
    *,
    trust_remote_code: bool = False,
    eager_attention: bool = False,
    progress: bool = True,
):
    """(AutoModelForSequenceClassification, fast tokenizer) for `labels`, with a new head if needed.

    `model`: a directory, a hub id, or a built-in teacher's name (converted on first use; `progress`
    says so on stderr).
    """
    from transformers import (  # lazy: transformers takes ~1 s to import; MLX teachers never need it
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    model = resolve_model(model, progress=progress)
    kwargs = {"trust_remote_code": trust_remote_code}
    if eager_attention:
        kwargs["attn_implementation"] = "eager"  # attention probabilities are only returned by eager
    if is_local(model):
        path = Path(model).expanduser()
        config = check_local_model(path)
        existing = head_labels(config)
        if existing is not None and existing != list(labels):
            raise ModelError(
                f"the model's labels {existing} differ from the data's labels {list(labels)}",
                "start from the base model, or use data with the model's labels",
            )
        check_tokenizer_files(path)
        source = str(path)
    else:
        source = model
    with loading_errors(model, local=is_local(model)):
        tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True, trust_remote_code=trust_remote_code)
        net = AutoModelForSequenceClassification.from_pretrained(
            source,
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)},
            **kwargs,
        )
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"{model} has no fast tokenizer", "mlx-edge needs a tokenizers-backed WordPiece tokenizer")
    check_tokenizer_fits(tokenizer, net.config, model)
    return use_classifier_pooling(net), tokenizer


def load_classifier(model_dir: Path, **kwargs):
    """A trained teacher directory as transformers' AutoModelForSequenceClassification (torch backend)."""
    from transformers import AutoModelForSequenceClassification  # lazy: the MLX backend labels without transformers

    with loading_errors(model_dir, local=True):
        net = AutoModelForSequenceClassification.from_pretrained(model_dir, **kwargs)
    return use_classifier_pooling(net)


def masked_mean(hidden, mask):
    """PyTorch: (B, L, H) hidden states, (B, L) 1/0 mask -> (B, H), the mean over real tokens (the
    torch twin of models/bert.py's mean_pool; the PyTorch mirror pools with it too)."""
    keep = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)


def use_classifier_pooling(net, pooling: str | None = None):
    """Make a transformers BERT classifier pool as its config's `classifier_pooling` says (`pooling`
    sets it first). "mean": the head reads the mean of the last hidden states over real tokens, as
    models/bert.py does. transformers' BERT pools [CLS] only, so its pooler's forward is replaced and
    a hook on the encoder hands it the attention mask; the pooler's weights stay (unused), so the
    checkpoint's names are the same either way. Returns `net`."""
    if pooling is not None:
        net.config.classifier_pooling = pooling
    if getattr(net.config, "classifier_pooling", "cls") != "mean":
        return net
    body = getattr(net, "bert", None)
    if body is None or getattr(body, "pooler", None) is None:
        raise ModelError(
            f"classifier_pooling 'mean' needs a BERT classifier, and this is a {type(net).__name__}",
            'set [teacher] head = "new"',
        )
    seen = {}

    def keep_mask(module, args, kwargs):
        seen["mask"] = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)

    def mean_pool(hidden):
        mask = seen.get("mask")
        return hidden.mean(dim=1) if mask is None else masked_mean(hidden, mask)

    body.register_forward_pre_hook(keep_mask, with_kwargs=True)
    body.pooler.forward = mean_pool
    body.pooler.requires_grad_(False)  # unused: no optimizer step for it, and DDP expects no gradient there
    return net


@contextmanager
def loading_errors(model: str | Path, *, local: bool) -> Iterator[None]:
    """transformers' and torch's errors for a model that cannot load, as one ModelError line each."""
    from safetensors import SafetensorError  # lazy: comes with transformers, which MLX teachers never need

    try:
        yield
    except OSError as exc:
        if not local:
            raise ModelError(
                f"cannot load {model!r}: it is not a local directory and the Hugging Face hub "
                "cannot be reached (offline or HF_HUB_OFFLINE=1)",
                f"download it where there is network (hf download {model} --local-dir DIR) and pass that directory",
            ) from None
        raise ModelError(f"cannot load {model}: {_first_line(exc)}") from None
    except SafetensorError as exc:
        raise ModelError(
            f"cannot read the weights of {model}: {_first_line(exc)}",
            "the file is damaged or truncated: copy or download the model again",
        ) from None
    except pickle.UnpicklingError:
        raise ModelError(
            f"{model}'s pytorch_model.bin holds more than tensors, so PyTorch's safe loader refuses it",
            "convert it to model.safetensors where you trust the file, or use a model that ships safetensors",
        ) from None
    except RuntimeError as exc:  # transformers: weights whose shapes disagree with config.json
        if "mismatched_sizes" in str(exc) or "size mismatch" in str(exc):
            raise ModelError(
                f"{model}: the weights' shapes disagree with its config.json",
                "fix config.json or re-save the model",
            ) from None
        raise ModelError(f"cannot load {model}: {_first_line(exc)}") from None
    except ValueError as exc:  # e.g. remote code required, unknown architecture
        raise ModelError(
            f"cannot load {model}: {_first_line(exc)}",
            "pass --trust-remote-code only if you trust this model's code",
        ) from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def check_tokenizer_files(model_dir: Path) -> None:
    """Refuse a model directory without a tokenizer (else every word becomes [UNK]) or with a broken one."""
    if not any((model_dir / name).is_file() for name in TOKENIZER_SOURCES):
        raise ModelError(
            f"{model_dir} has no tokenizer files ({', '.join(TOKENIZER_SOURCES[:2])}): every word would be [UNK]",
            "copy the tokenizer files of the base model next to its config.json",
        )
    if (model_dir / "tokenizer.json").is_file() or (model_dir / "vocab.txt").is_file():
        load_tokenizer(model_dir)  # a ModelError for a damaged tokenizer.json


def check_tokenizer_fits(tokenizer, config, model: str | Path) -> None:
    """A tokenizer with real pieces whose ids all have a row in the model's embedding table."""
    pieces = len(tokenizer) - len(set(tokenizer.all_special_ids))
    if pieces <= 0:
        raise ModelError(
            f"{model}'s tokenizer has only its {len(tokenizer)} special tokens: every word would be [UNK]",
            "copy the tokenizer files of the base model next to its config.json",
        )
    rows = getattr(config, "vocab_size", None)
    if rows is not None and len(tokenizer) > rows:
        raise ModelError(
            f"{model}'s tokenizer has {len(tokenizer)} tokens but the model only {rows} embedding rows",
            "the tokenizer files belong to another model: copy the model's own",
        )


# Hashes of a teacher's files by where and what each file is (path, inode, size, times): one run of the
# ladder hashes the same teacher a dozen times (e5-small's 470 MB of weights and 17 MB tokenizer.json, a
# second each), and a file rewritten in place or renamed over gets another inode or time.
_HASHES: dict[tuple, str] = {}


def file_state(path: Path) -> tuple:
    """Where and what a file is now (path, inode, size, times): a key for what was computed from it."""
    st = path.stat()
    return str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _hash_once(kind: str, paths: list[Path], compute) -> str:
    key = (kind, *(file_state(p) for p in paths))
    if key not in _HASHES:
        if len(_HASHES) > 64:
            _HASHES.clear()
        _HASHES[key] = compute()
    return _HASHES[key]


def file_hash_of_weights(model_dir: Path) -> str:
    """sha256 of the teacher's weights (the single file, or the index of shards)."""
    for name in ("model.safetensors", "model.safetensors.index.json"):
        path = Path(model_dir) / name
        if path.is_file():
            return _hash_once("weights", [path], lambda path=path: sha256_file(path))
    raise ModelError(f"{model_dir} has no safetensors weights", "re-save the teacher with safe_serialization")


def tokenizer_hash(model_dir: Path) -> str:
    """sha256 over the tokenizer files that decide ids (a student must tokenize identically)."""
    files = [Path(model_dir) / name for name in ("tokenizer.json", "vocab.txt") if (Path(model_dir) / name).is_file()]
    return _hash_once("tokenizer", files, lambda: _tokenizer_hash(model_dir))


def _tokenizer_hash(model_dir: Path) -> str:
    digest = hashlib.sha256()
    found = False
    for name in ("tokenizer.json", "vocab.txt"):
        path = Path(model_dir) / name
        if path.is_file():
            data = path.read_bytes()
            if name == "tokenizer.json":  # truncation/padding settings do not change ids
                doc = json.loads(data)
                doc.pop("truncation", None)
                doc.pop("padding", None)
                data = json.dumps(doc, sort_keys=True).encode()
            digest.update(name.encode() + b"\0" + data)
            found = True
    if not found:
        raise ModelError(
            f"{model_dir} has no tokenizer.json or vocab.txt", "copy the tokenizer files next to the model"
        )
    return digest.hexdigest()
