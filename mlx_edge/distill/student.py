"""The student: its shape (preset, config JSON or directory), its initialization, the layer mapping."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from mlx_edge.distill.factorize import check_factorizable, factorized_from, unfactorized
from mlx_edge.distill.shrink import ShrinkPlan, shrink_from_teacher
from mlx_edge.errors import DistillError
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, init_weights
from mlx_edge.models.checkpoint import load_config, load_model

# TinyBERT-4 and MiniLM-like shapes. `gelu_new` (tanh form): same quality, much cheaper on MLX CPU
# than the exact erf form, and transformers/CoreML implement it as well.
PRESETS = {
    "tiny": dict(
        num_hidden_layers=4, hidden_size=312, num_attention_heads=12, intermediate_size=1200, hidden_act="gelu_new"
    ),
    "small": dict(
        num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536, hidden_act="gelu_new"
    ),
    "small-512": dict(
        num_hidden_layers=6, hidden_size=512, num_attention_heads=8, intermediate_size=2048, hidden_act="gelu_new"
    ),
}
INIT_MODES = ("random", "embeddings", "teacher", "student")

# `auto`, the default student: 4 layers cut from the teacher, as wide as both the int4 kernels' groups
# of 32 (MLX's and CoreML's blocks) and the teacher's heads divide, at most 288 wide, the teacher's FFN
# (at most 1536, a multiple of 32): the one student the whole bundle ladder is made from (fp16, and
# int8 and int4 split and quantize it). The demo's measured 4 x 288 for a 12-head teacher of 384 or more.
AUTO_LAYERS, AUTO_WIDTH, AUTO_FFN, AUTO_GROUP = 4, 288, 1536, 32
STUDENT_SPECS = ("auto", *PRESETS, "half")  # the named students (besides static, a file or a directory)


def auto_shape(teacher: BertConfig) -> dict | None:
    """The `auto` student's shape for `teacher`, or None when no cut of it has widths that both 32 and
    its heads divide (e.g. 24 wide with 2 heads)."""
    step = math.lcm(AUTO_GROUP, teacher.num_attention_heads)
    width = min(AUTO_WIDTH, teacher.hidden_size) // step * step
    ffn = min(AUTO_FFN, teacher.intermediate_size) // AUTO_GROUP * AUTO_GROUP
    if width == 0 or ffn == 0:
        return None
    return {
        "num_hidden_layers": min(AUTO_LAYERS, teacher.num_hidden_layers),
        "hidden_size": width,
        "num_attention_heads": teacher.num_attention_heads,
        "intermediate_size": ffn,
        "hidden_act": teacher.hidden_act,
    }


def student_config(spec: str, teacher: BertConfig) -> tuple[BertConfig, Path | None]:
    """(config, source directory if `spec` is an existing student). Vocabulary and labels follow the teacher.

    `spec`: auto (`auto_shape`; `tiny` for a teacher with no such cut), a preset (tiny, small,
    small-512, half: the teacher's width with half its layers), a BERT config.json file, or a student
    directory to continue from.
    """
    shared = dict(
        vocab_size=teacher.vocab_size,
        max_position_embeddings=teacher.max_position_embeddings,
        type_vocab_size=teacher.type_vocab_size,
        pad_token_id=teacher.pad_token_id,
        id2label=dict(teacher.id2label),
    )
    if spec == "half":
        # BERT's [CLS] pooler whatever the teacher's head reads: the export path's (bridges, CoreML) head
        return replace(
            teacher, num_hidden_layers=max(1, teacher.num_hidden_layers // 2), classifier_pooling="cls"
        ), None
    if spec == "auto":
        return BertConfig(**{**(auto_shape(teacher) or PRESETS["tiny"]), **shared}), None
    if spec in PRESETS:
        return BertConfig(**{**PRESETS[spec], **shared}), None
    path = Path(spec)
    if path.is_dir():
        config = load_config(path)  # its vocabulary may be a pruned subset of the teacher's (checked by piece)
        if config.model_type == "static":  # a token table: nothing a transformer could continue from
            raise DistillError(
                f"{path} is a static student: it cannot be continued as a transformer",
                "distill a new static student with --student static, or start from a preset",
            )
        if config.vocab_size > teacher.vocab_size or config.labels != teacher.labels:
            raise DistillError(
                f"student {path} does not fit this teacher (vocab {config.vocab_size} vs "
                f"{teacher.vocab_size}, labels {config.labels} vs {teacher.labels})",
                "continue from a student of this teacher, or start from a preset",
            )
        return config, path
    if path.is_file():
        try:
            params = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise DistillError(f"{path} is not valid JSON ({exc})") from None
        if not isinstance(params, dict):
            raise DistillError(f"{path} is not a JSON object of BERT config keys", 'e.g. {"num_hidden_layers": 4}')
        bad = {
            k: params[k]
            for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")
            if k in params and (type(params[k]) is not int or params[k] < 1)
        }
        if bad:
            listed = ", ".join(f"{k} {v!r}" for k, v in bad.items())
            raise DistillError(
                f"student config {path}: {listed}: layer counts and sizes must be whole numbers >= 1",
                "fix the JSON file",
            )
        width = params.get("hidden_size", BertConfig.hidden_size)
        heads = params.get("num_attention_heads", BertConfig.num_attention_heads)
        if width % heads:
            raise DistillError(
                f"student config {path}: hidden_size {width} is not divisible by num_attention_heads {heads}",
                "each head gets hidden_size / num_attention_heads dimensions: fix the JSON file",
            )
        params = {**params, **shared, "model_type": "bert"}
        params.pop("num_labels", None)
        config = BertConfig.from_dict(params)
        check_factorizable(config)
        return config, None
    raise DistillError(
        f"unknown student {spec!r}",
        f"use auto or a preset ({', '.join(STUDENT_SPECS[1:])}), a config .json, or a student directory",
    )


def default_layer_map(student_layers: int, teacher_layers: int) -> dict[int, int]:
    """Uniform mapping, 0-based encoder layers: student i ↔ teacher (i+1)·k − 1, k = T // S."""
    k = max(1, teacher_layers // student_layers)
    return {i: min(teacher_layers, (i + 1) * k) - 1 for i in range(student_layers)}


def parse_layer_map(text: str | None, student_layers: int, teacher_layers: int) -> dict[int, int]:
    """ "0:2,1:5" → {0: 2, 1: 5}; None/"" → the uniform default."""
    if not text:
        return default_layer_map(student_layers, teacher_layers)
    mapping = {}
    try:
        for pair in text.split(","):
            s, t = (int(x) for x in pair.split(":"))
            mapping[s] = t
    except ValueError:
        raise DistillError(f"layer map {text!r} is not like '0:2,1:5'", "student:teacher pairs, 0-based") from None
    bad = [f"{s}:{t}" for s, t in mapping.items() if not (0 <= s < student_layers and 0 <= t < teacher_layers)]
    if bad:
        raise DistillError(
            f"layer map pairs {', '.join(bad)} out of range (student 0..{student_layers - 1}, "
            f"teacher 0..{teacher_layers - 1})"
        )
    return mapping


def init_student(
    config: BertConfig,
    *,
    mode: str,
    seed: int = 0,
    teacher: BertForSequenceClassification | None = None,
    teacher_layers: list[int] | None = None,
    source: Path | None = None,
    keep: np.ndarray | None = None,
    shrink: ShrinkPlan | None = None,
    row_weights: np.ndarray | None = None,
) -> BertForSequenceClassification:
    """A student initialized randomly, from a subset of teacher layers (DistilBERT), or from a directory.

    `keep`: the teacher's vocabulary rows a pruned student has (its word embeddings come from those rows).
    `shrink`: for `teacher` mode with a student narrower than the teacher, the parts to keep (shrink.py).
    `row_weights`: per-piece weights of the SVD that splits the table when `config.embedding_size` is
    set (factorize.py; also when a distilled student with full rows is continued factorized).
    """
    if mode not in INIT_MODES:
        raise DistillError(f"unknown init {mode!r}", f"use one of {', '.join(INIT_MODES)}")
    if mode == "student":
        if source is None:
            raise DistillError("--init student needs --student DIR (an existing student directory)")

        model = load_model(source, labels=config.labels, require_head=True)
        if config.embedding_size is not None and model.config.embedding_size is None:
            model = factorized_from(model, config, row_weights)  # --embedding-size on a distilled student
        model.train()
        return model
    if config.embedding_size is not None:  # built with full rows, then split (factorize.py)
        full = init_student(
            unfactorized(config), mode=mode, seed=seed, teacher=teacher, teacher_layers=teacher_layers,
            keep=keep, shrink=shrink,
        )  # fmt: skip
        return factorized_from(full, config, row_weights)
    model = BertForSequenceClassification(config)
    init_weights(model, seed=seed)
    if mode == "teacher" and shrink is not None:
        shrink_from_teacher(model, teacher, shrink, keep)
    elif mode == "teacher":
        _copy_from_teacher(model, teacher, teacher_layers, keep)
    elif mode == "embeddings":
        _embeddings_from_teacher(model, teacher, keep)
    model.train()
    mx.eval(model.parameters())
    return model


def _embeddings_from_teacher(student, teacher, keep) -> None:
    """The teacher's embeddings (word: its kept rows; positions; token types) as they are when the widths
    match, else projected on the word rows' principal components (PCA to the student's width, one basis
    for all three, so their sum keeps its geometry), with the embeddings LayerNorm left at identity.
    A narrow student then starts from what the teacher knows about each piece; its layers stay random."""
    if teacher is None:
        raise DistillError("--init embeddings needs the teacher model")
    t_emb, s_emb = teacher.bert.embeddings, student.bert.embeddings
    words = np.array(t_emb.word_embeddings.weight, dtype=np.float32)
    words = words if keep is None else words[keep]
    positions = np.array(t_emb.position_embeddings.weight, dtype=np.float32)
    types = np.array(t_emb.token_type_embeddings.weight, dtype=np.float32)
    width = student.config.hidden_size
    if width > words.shape[1]:
        raise DistillError(
            f"--init embeddings: the student ({width}) is wider than the teacher ({words.shape[1]})",
            "use --init random",
        )
    if width < words.shape[1]:
        mean = words.mean(axis=0)
        _, _, vt = np.linalg.svd(words - mean, full_matrices=False)  # rows of vt: principal directions
        basis = vt[:width].T
        words, positions, types = (words - mean) @ basis, positions @ basis, types @ basis
    s_emb.word_embeddings.weight = mx.array(words)
    rows = min(len(positions), s_emb.position_embeddings.weight.shape[0])
    s_emb.position_embeddings.weight = mx.array(positions[:rows])
    s_emb.token_type_embeddings.weight = mx.array(types[: s_emb.token_type_embeddings.weight.shape[0]])


def _copy_from_teacher(student, teacher, teacher_layers, keep=None):
    if teacher is None:
        raise DistillError("--init teacher needs the teacher model")
    s, t = student.config, teacher.config
    if (s.hidden_size, s.intermediate_size, s.num_attention_heads, s.vocab_size) != (
        t.hidden_size,
        t.intermediate_size,
        t.num_attention_heads,
        t.vocab_size if keep is None else len(keep),
    ):
        raise DistillError(
            f"--init teacher copies layers, so widths must match: student {s.hidden_size}/"
            f"{s.intermediate_size}, teacher {t.hidden_size}/{t.intermediate_size}",
            "use --student half (or a config with the teacher's widths), or --init random",
        )
    chosen = teacher_layers or list(default_layer_map(s.num_hidden_layers, t.num_hidden_layers).values())
    if len(chosen) != s.num_hidden_layers or not all(0 <= j < t.num_hidden_layers for j in chosen):
        raise DistillError(
            f"--init-layers {chosen}: need {s.num_hidden_layers} teacher layers in 0..{t.num_hidden_layers - 1}"
        )
    weights = dict(tree_flatten(teacher.parameters()))
    new = {}
    for name, value in weights.items():
        if name.startswith("bert.encoder.layer."):
            index = int(name.split(".")[3])
            if index in chosen:
                rest = name.split(".", 4)[4]
                new[f"bert.encoder.layer.{chosen.index(index)}.{rest}"] = value
        elif name == "bert.embeddings.word_embeddings.weight" and keep is not None:
            new[name] = value[mx.array(keep)]  # a pruned vocabulary: the kept rows, in order
        else:  # embeddings, pooler, classifier
            new[name] = value
    student.load_weights(list(new.items()), strict=True)
