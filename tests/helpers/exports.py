"""Cached students and bundles for the export/check tests (one export per option set per run).

A random tiny student stands in for a distilled one until `mlx-edge distill` lands in these tests:
an HF BERT directory as `save_model` writes it. Its weights are drawn with a larger
initializer_range (0.2) than BERT's 0.02 so that different texts get clearly different pooled
embeddings, as a trained student's do (with 0.02 all embeddings are nearly equal and no head can
learn corrections that disagree).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from click.testing import CliRunner

from tests.helpers.tiny import build_tiny_bert

_ROOT = Path(tempfile.mkdtemp(prefix="mlx-edge-export-tests-"))
atexit.register(shutil.rmtree, _ROOT, True)

SEQ_LEN = "32"
N_TEXTS = "12"


@cache
def tiny_student() -> Path:
    return build_tiny_bert(_ROOT / "student", seed=3, initializer_range=0.2)


@cache
def wide_student() -> Path:
    """Hidden 64, FFN 128: every linear weight is above coremltools' compression threshold (2048
    elements), so quantized exports compress the layers, not only the embeddings. initializer_range
    0.1: at 0.2 this wider random model's softmax is so peaked that int4 moves it by 0.14."""
    return build_tiny_bert(_ROOT / "wide-student", seed=3, initializer_range=0.1, hidden_size=64, intermediate_size=128)


STUDENTS = {"tiny": tiny_student, "wide": wide_student}


@cache
def exported(*options: str, student: str = "tiny") -> Path:
    """The bundle `mlx-edge export` writes with `options` from the `student` of STUDENTS (cached for the
    whole test run)."""
    from mlx_edge.cli import main

    name = ("bundle" if student == "tiny" else f"bundle-{student}") + "".join(
        o.replace("-", "_").replace(",", "_") for o in options
    )
    out = _ROOT / name
    args = [
        "export",
        str(STUDENTS[student]()),
        "--out",
        str(out),
        "--seq-len",
        SEQ_LEN,
        "--n-texts",
        N_TEXTS,
        "--quiet",
        *options,
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out


def copy_bundle(bundle: Path, dest: Path) -> Path:
    shutil.copytree(bundle, dest)
    return dest
