"""The model's own tokenizer through the `tokenizers` library (Rust; no PyTorch import).

Two kinds, both of which the Swift package reproduces: BERT's WordPiece (BertNormalizer) and
SentencePiece Unigram (the XLM-R pipeline: precompiled charsmap, Metaspace, Unigram), as
multilingual-e5 uses. Reads `tokenizer.json` when the directory has one (what transformers' fast
tokenizer uses), else builds the BERT tokenizer from `vocab.txt` and `tokenizer_config.json`.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

from mlx_edge.errors import ModelError, UnknownTokensWarning
from mlx_edge.models.unigram_spec import SPEC_FILE, spec_tokenizer_json

# Above this share of unknown tokens a model trains on noise without knowing it (MiniLM reads
# ~64% of the tokens of Chinese review text as [UNK]); a few percent is normal for rare symbols.
UNKNOWN_WARN_SHARE = 0.03


@dataclass(frozen=True)
class TokenizerSettings:
    """What the Swift tokenizer needs to tokenize exactly as this one does (the WordPiece flags are
    False/None for a Unigram tokenizer, whose normalization lives in its tokenizer.json)."""

    do_lower_case: bool
    strip_accents: bool | None
    tokenize_chinese_chars: bool
    clean_text: bool
    cls_token: str = "[CLS]"
    sep_token: str = "[SEP]"
    pad_token: str = "[PAD]"
    unk_token: str = "[UNK]"
    kind: str = "wordpiece"  # or "unigram"


class TextTokenizer:
    def __init__(self, backend, settings: TokenizerSettings, source: Path):
        self._tk = backend
        self.settings = settings
        self.source = source
        self._tk.no_padding()
        self.pad_id = self.token_id(settings.pad_token)
        self.cls_id = self.token_id(settings.cls_token)
        self.sep_id = self.token_id(settings.sep_token)
        self.unk_id = self.token_id(settings.unk_token)

    @property
    def vocab_size(self) -> int:
        return self._tk.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int:
        token_id = self._tk.token_to_id(token)
        if token_id is None:
            raise ModelError(
                f"tokenizer in {self.source} has no {token} token",
                "its special tokens are missing: re-save the model's tokenizer with transformers",
            )
        return token_id

    @property
    def special_ids(self) -> set[int]:
        return {self.cls_id, self.sep_id, self.pad_id}

    def pieces(self) -> list[str]:
        """Every token id's piece, in id order ("" for an id the vocabulary skips)."""
        out = [""] * self.vocab_size
        for piece, token_id in self._tk.get_vocab(with_added_tokens=True).items():
            if token_id < len(out):
                out[token_id] = piece
        return out

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`, special tokens left out (the tokenizer's own decoder: spaces, ## joins)."""
        return self._tk.decode(list(ids), skip_special_tokens=True)

    def encode_batch(self, texts: list[str], *, max_length: int) -> list[list[int]]:
        """Ids with [CLS]/[SEP], truncated to `max_length`, unpadded."""
        if max_length < 2:
            raise ModelError(f"max length {max_length} is too small", "use at least 8")
        self._tk.enable_truncation(max_length)
        return [e.ids for e in self._tk.encode_batch(list(texts))]


def unknown_share(ids: list, unk_id: int | None, special_ids: set[int]) -> float:
    """The share of a corpus's (non-special) tokens that are the unknown token."""
    if unk_id is None:
        return 0.0
    total = unknown = 0
    for row in ids:
        for token in row:
            if token not in special_ids:
                total += 1
                unknown += token == unk_id
    return unknown / total if total else 0.0


def warn_unknown(share: float, where: str) -> None:
    """One warning when `share` of the tokens of `where` are unknown to the tokenizer."""
    if share > UNKNOWN_WARN_SHARE:
        warnings.warn(
            UnknownTokensWarning(
                f"{share:.0%} of the tokens of {where} are unknown to the tokenizer: the model cannot read them "
                "(a teacher whose vocabulary covers the language helps, e.g. a multilingual one)"
            ),
            stacklevel=2,
        )


def load_tokenizer(model_dir: str | Path) -> TextTokenizer:

    model_dir = Path(model_dir)
    config = _read_json(model_dir / "tokenizer_config.json")
    if (model_dir / "tokenizer.json").is_file():
        try:
            backend = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises a plain Exception for malformed files
            raise ModelError(f"cannot read {model_dir / 'tokenizer.json'}: {exc}") from exc
        settings = _settings_from_normalizer(json.loads((model_dir / "tokenizer.json").read_text()), config)
    elif (model_dir / SPEC_FILE).is_file():  # a bundle: the Unigram spec the app reads, and nothing else
        document = _spec_document(model_dir / SPEC_FILE)
        backend = Tokenizer.from_str(json.dumps(document))
        settings = _settings_from_normalizer(document, config)
    elif (model_dir / "vocab.txt").is_file():
        settings = _settings_from_config(config)
        wrapper = BertWordPieceTokenizer(
            str(model_dir / "vocab.txt"),
            clean_text=settings.clean_text,
            handle_chinese_chars=settings.tokenize_chinese_chars,
            strip_accents=settings.strip_accents,
            lowercase=settings.do_lower_case,
            unk_token=settings.unk_token,
            sep_token=settings.sep_token,
            cls_token=settings.cls_token,
            pad_token=settings.pad_token,
        )
        backend = wrapper._tokenizer
    else:
        raise ModelError(
            f"{model_dir} has no tokenizer (tokenizer.json, {SPEC_FILE} or vocab.txt)",
            "copy the tokenizer files of the model next to its config.json",
        )
    return TextTokenizer(backend, settings, model_dir)


def _spec_document(path: Path) -> dict:
    """The tokenizer.json a bundle's Unigram spec stands for (models/unigram_spec.py)."""
    try:
        return spec_tokenizer_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # ValueError covers JSON and UTF-8 errors
        raise ModelError(f"cannot read {path}: {exc}", "export the bundle again") from exc
    except ModelError as exc:
        raise ModelError(f"{path}: {exc.message}", exc.hint) from exc


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelError(f"{path} is not valid JSON ({exc})") from exc


def _special_tokens(config: dict) -> dict[str, str]:
    out = {}
    for key in ("cls_token", "sep_token", "pad_token", "unk_token"):
        value = config.get(key)
        if isinstance(value, dict):  # AddedToken serialized
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    return out


def _settings_from_config(config: dict) -> TokenizerSettings:
    return TokenizerSettings(
        do_lower_case=bool(config.get("do_lower_case", True)),
        strip_accents=config.get("strip_accents"),
        tokenize_chinese_chars=bool(config.get("tokenize_chinese_chars", True)),
        clean_text=True,
        **_special_tokens(config),
    )


def _settings_from_normalizer(tokenizer_json: dict, config: dict) -> TokenizerSettings:
    model = tokenizer_json.get("model") or {}
    if model.get("type") == "Unigram":
        return _unigram_settings(tokenizer_json, config)
    normalizer = tokenizer_json.get("normalizer") or {}
    if model.get("type") != "WordPiece" or normalizer.get("type") != "BertNormalizer":
        raise ModelError(
            f"tokenizer model {model.get('type')!r} with normalizer {normalizer.get('type')!r} is neither BERT's "
            "WordPiece nor a SentencePiece Unigram",
            "mlx-edge (and its Swift tokenizer) support those two kinds",
        )
    return TokenizerSettings(
        do_lower_case=bool(normalizer.get("lowercase", True)),
        strip_accents=normalizer.get("strip_accents"),
        tokenize_chinese_chars=bool(normalizer.get("handle_chinese_chars", True)),
        clean_text=bool(normalizer.get("clean_text", True)),
        **_special_tokens(config),
    )


UNIGRAM_SPECIALS = {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


def _unigram_settings(tokenizer_json: dict, config: dict) -> TokenizerSettings:
    """XLM-R style: <s> text </s>; the configured special tokens win, then bos/eos, then XLM-R's names."""
    model = tokenizer_json["model"]
    vocab = model.get("vocab")
    if not isinstance(vocab, list) or not vocab or not all(isinstance(v, list) and len(v) == 2 for v in vocab):
        raise ModelError(
            "tokenizer.json's Unigram vocab is not a list of [piece, score] pairs", "re-save the tokenizer"
        )
    specials = dict(UNIGRAM_SPECIALS)
    for key, fallback in (("cls_token", "bos_token"), ("sep_token", "eos_token")):
        value = config.get(fallback)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            specials[key] = value
    specials.update(_special_tokens(config))
    unk_id = model.get("unk_id")
    if unk_id is None or not 0 <= unk_id < len(vocab) or vocab[unk_id][0] != specials["unk_token"]:
        raise ModelError(
            f"tokenizer.json's Unigram model has no {specials['unk_token']} piece as its unk_id",
            "unknown text would have no id: keep <unk> in the vocabulary (and unk_id pointing at it)",
        )
    return TokenizerSettings(
        do_lower_case=False,
        strip_accents=None,
        tokenize_chinese_chars=False,
        clean_text=False,
        kind="unigram",
        **specials,
    )
