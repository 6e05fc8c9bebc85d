"""The targets cache: what the teacher said about every training text, for the student to learn.

Layout of a targets directory:
  mlx_edge_manifest.json   teacher hash, tokenizer hash + settings, max length, labels, layers,
                           data fingerprints, shard size, example count
  index.json               the completed shards, in order: file, first example, count, sha256
  shard-00000.safetensors  logits (N, C) fp32; ids (N,) int64 example index; text_hash (N,) int64;
                           lengths (N,) int32; optional hidden.{k} (N, L, H) fp16 for layer k
                           (0 = embeddings) and attention.{k} (N, heads, L, L) fp16 for layer k
                           (1-based: the attention inside encoder layer k), padded to the shard's
                           longest example.
Each shard is written to a temporary file and renamed; the index is rewritten (atomically) after
each shard, so an interrupted run resumes after the last complete shard. NumPy only: reading a
cache imports neither PyTorch nor MLX.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from mlx_edge.errors import TargetsError
from mlx_edge.fileio import atomic_write_json, sha256_file
from mlx_edge.manifest import MANIFEST_NAME, read_manifest

INDEX_NAME = "index.json"


def text_hash(text: str) -> int:
    """A stable 63-bit id of a text (blake2b), stored per example to match cache rows to texts."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def shard_name(number: int) -> str:
    return f"shard-{number:05d}.safetensors"


def estimate_bytes(
    lengths: np.ndarray,
    *,
    shard_size: int,
    num_labels: int,
    hidden_size: int,
    heads: int,
    hidden_layers: list[int],
    attention_layers: list[int],
) -> int:
    """Bytes the cache will take: each shard pads to its own longest example."""
    total = 0
    for start in range(0, len(lengths), shard_size):
        n = len(lengths[start : start + shard_size])
        longest = int(lengths[start : start + shard_size].max())
        total += n * (num_labels * 4 + 8 + 8 + 4)
        total += len(hidden_layers) * n * longest * hidden_size * 2
        total += len(attention_layers) * n * heads * longest * longest * 2
    return total


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


def write_shard(directory: Path, number: int, tensors: dict[str, np.ndarray]) -> dict:
    """Write one shard atomically; return its index entry."""

    path = Path(directory) / shard_name(number)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".safetensors", dir=directory)
    os.close(fd)
    try:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return {
        "file": path.name,
        "start": int(tensors["ids"][0]),
        "count": int(len(tensors["ids"])),
        "sha256": sha256_file(path),
    }


def read_index(directory: Path) -> list[dict]:
    path = Path(directory) / INDEX_NAME
    if not path.is_file():
        return []
    try:
        return json.loads(path.read_text())["shards"]
    except (ValueError, KeyError) as exc:
        raise TargetsError(f"{path} is damaged ({exc})", "delete the targets directory and label again") from exc


def write_index(directory: Path, shards: list[dict]) -> None:
    atomic_write_json(Path(directory) / INDEX_NAME, {"shards": shards})


@dataclass
class TargetsCache:
    """Read side, for distillation: rows by example index, checked against the student's setup."""

    directory: Path
    manifest: dict
    shards: list[dict]

    @classmethod
    def open(cls, directory: str | Path, *, verify_hashes: bool = False) -> TargetsCache:
        directory = Path(directory)
        manifest = read_manifest(directory, kind="targets")
        if manifest is None:
            raise TargetsError(
                f"{directory} is not a targets cache (no {MANIFEST_NAME})",
                "make one with: mlx-edge teacher label --teacher DIR --data FILE --out DIR",
            )
        shards = read_index(directory)
        done = sum(s["count"] for s in shards)
        if done != manifest["examples"]:
            raise TargetsError(
                f"{directory} is incomplete ({done} of {manifest['examples']} examples)",
                "re-run the same mlx-edge teacher label command to finish it",
            )
        for shard in shards:
            path = directory / shard["file"]
            if not path.is_file() or (verify_hashes and sha256_file(path) != shard["sha256"]):
                raise TargetsError(f"{path} is missing or damaged", "delete it and re-run teacher label")
        return cls(directory, manifest, shards)

    @property
    def labels(self) -> list[str]:
        return self.manifest["labels"]

    def check_compatible(self, *, tokenizer_hash: str, max_length: int, labels: list[str]) -> None:
        """Refuse a cache made with another tokenizer, max length or label set."""
        m = self.manifest
        if m["tokenizer_hash"] != tokenizer_hash:
            raise TargetsError(
                f"targets in {self.directory} were made with another tokenizer",
                "the student must use the teacher's tokenizer; re-label or pick the right cache",
            )
        if m["max_length"] != max_length:
            raise TargetsError(
                f"targets in {self.directory} use max length {m['max_length']}, not {max_length}",
                f"pass --max-length {m['max_length']} or re-label",
            )
        if m["labels"] != list(labels):
            raise TargetsError(
                f"targets labels {m['labels']} differ from the data's labels {list(labels)}",
                "label the same data the student trains on",
            )

    def load(self, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """Per-example arrays of every shard, concatenated (not the per-shard padded hidden/attention).

        Reads only the named tensors: a shard's hidden states and attention maps, most of its
        bytes, stay on disk (loading whole shards took 4.3 GB for a 10k cache with 4 hidden layers).
        """

        keys = names or ("logits", "ids", "text_hash", "lengths")
        parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        for shard in self.shards:
            with safe_open(str(self.directory / shard["file"]), framework="np") as f:
                for k in keys:
                    parts[k].append(f.get_tensor(k))
        return {k: np.concatenate(v) for k, v in parts.items()}

    def available(self) -> tuple[list[int], list[int]]:
        """(hidden-state layers, attention layers) this cache holds."""
        return list(self.manifest.get("hidden_layers", [])), list(self.manifest.get("attention_layers", []))

    def row_of_hash(self) -> dict[int, int]:
        """text hash → cache row (the first, if a text occurs twice)."""
        hashes = self.load(("text_hash",))["text_hash"]
        out: dict[int, int] = {}
        for row, h in enumerate(hashes.tolist()):
            out.setdefault(h, row)
        return out

    def gather(self, rows: np.ndarray, width: int, keys: list[str]) -> dict[str, np.ndarray]:
        """Rows of per-token targets (hidden.k / attention.k), cropped or zero-padded to `width`.

        Reads just the requested rows' bytes from the shard files (one pread per row), so a 10k
        cache of hidden states never has to fit in memory, nor count in the process's RSS (reading
        through memory maps did: ~1.9 GB of file pages after a dozen batches of 4 hidden layers).
        """
        if not hasattr(self, "_readers"):
            self._readers = [_RowReader(self.directory / s["file"]) for s in self.shards]
            self._starts = np.array([s["start"] for s in self.shards])
        out: dict[str, np.ndarray] = {}
        shard_of = np.searchsorted(self._starts, rows, side="right") - 1
        for key in keys:
            parts = []
            for row, shard in zip(rows.tolist(), shard_of.tolist()):
                value = self._readers[shard].row(key, row - int(self._starts[shard]))
                parts.append(_fit(value, width, attention=key.startswith("attention.")))
            out[key] = np.stack(parts)
        return out


_NUMPY_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8"}  # safetensors is little-endian


class _RowReader:
    """Reads row i of a tensor in a safetensors file with one pread (the format is a JSON header
    of dtype, shape and byte offsets, then the row-major data)."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            self.header = json.loads(f.read(size))
        self.data_start = 8 + size
        self.fd: int | None = None

    def row(self, key: str, index: int) -> np.ndarray:
        info = self.header.get(key)
        if info is None or info["dtype"] not in _NUMPY_DTYPES:
            raise TargetsError(
                f"{self.path} has no readable tensor {key!r}", "delete the cache and re-run teacher label"
            )
        dtype, shape = np.dtype(_NUMPY_DTYPES[info["dtype"]]), info["shape"]
        row_bytes = dtype.itemsize * int(np.prod(shape[1:]))
        if not 0 <= index < shape[0]:
            raise TargetsError(f"{self.path}: row {index} of {key} is out of range ({shape[0]} rows)")
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY)
        data = os.pread(self.fd, row_bytes, self.data_start + info["data_offsets"][0] + index * row_bytes)
        if len(data) != row_bytes:
            raise TargetsError(f"{self.path} is truncated", "delete it and re-run teacher label")
        return np.frombuffer(data, dtype=dtype).reshape(shape[1:])

    def __del__(self):
        if self.fd is not None:
            os.close(self.fd)


def _fit(value: np.ndarray, width: int, *, attention: bool) -> np.ndarray:
    """Crop/pad a (L, H) hidden row or a (heads, L, L) attention row to `width` tokens."""
    if attention:
        heads, length, _ = value.shape
        out = np.zeros((heads, width, width), dtype=value.dtype)
        n = min(length, width)
        out[:, :n, :n] = value[:, :n, :n]
        return out
    out = np.zeros((width, value.shape[1]), dtype=value.dtype)
    n = min(value.shape[0], width)
    out[:n] = value[:n]
    return out
