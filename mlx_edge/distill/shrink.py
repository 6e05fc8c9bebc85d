"""A narrower student that starts as a slice of the teacher (width pruning, as in Minitron).

`--init teacher` for a student narrower than its teacher: the student's layers are the mapped teacher
layers with the least active parts cut away, ranked on a batch of the training data:

- residual channels (the hidden width): the mean |activation| of each channel over every layer's
  output; the student keeps the top `hidden_size` channels in every tensor that reads or writes the
  residual stream (embeddings, LayerNorms, the attention and FFN projections, the pooler, the head);
- per head, query/key dimensions by the mean |q_i * k_i| (their part of the attention scores) and
  value dimensions by mean |v_i| times the output projection's column norm; the queries are scaled
  by sqrt(new head width / old) so the scores keep the teacher's 1/sqrt(head width) scaling;
- FFN neurons by mean |GELU output| times the output projection's column norm.

The student then computes an approximation of the teacher's function instead of noise, which a
random narrow student needs many epochs (and luck) to find on a few thousand examples. The teacher's
activation may differ from the student's preset (exact GELU vs the tanh form): a small mismatch the
distillation removes. Kept indices stay in their original order.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from mlx_edge.errors import DistillError
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, additive_mask


@dataclass(frozen=True)
class ShrinkPlan:
    """Which teacher parts a narrower student keeps (teacher indices, ascending within each group)."""

    layers: list[int]  # teacher layer of each student layer
    channels: np.ndarray  # (hidden,) residual channels
    qk: list[np.ndarray]  # per student layer: (heads, head_dim) query/key dims within each teacher head
    v: list[np.ndarray]  # per student layer: (heads, head_dim) value dims within each teacher head
    neurons: list[np.ndarray]  # per student layer: (intermediate,) FFN neurons


def check_shrinkable(student: BertConfig, teacher: BertConfig) -> None:
    if (
        student.hidden_size > teacher.hidden_size
        or student.intermediate_size > teacher.intermediate_size
        or student.num_attention_heads != teacher.num_attention_heads
        or student.head_dim > teacher.head_dim
        or student.hidden_size % student.num_attention_heads
    ):
        raise DistillError(
            f"--init teacher: a student of width {student.hidden_size}/{student.intermediate_size} with "
            f"{student.num_attention_heads} heads cannot be cut from a teacher of width "
            f"{teacher.hidden_size}/{teacher.intermediate_size} with {teacher.num_attention_heads} heads",
            "the student needs the teacher's head count and no wider parts; else use --init embeddings or random",
        )


def plan_shrink(
    teacher: BertForSequenceClassification,
    student: BertConfig,
    layers: list[int],
    input_ids: np.ndarray,
    mask: np.ndarray,
) -> ShrinkPlan:
    """Rank the teacher's parts on one calibration batch (teacher ids, (B, L), and its 0/1 mask)."""
    check_shrinkable(student, teacher.config)
    t_layers = teacher.config.num_hidden_layers
    if len(layers) != student.num_hidden_layers or not all(0 <= j < t_layers for j in layers):
        raise DistillError(
            f"--init teacher: teacher layers {list(layers)} for a {student.num_hidden_layers}-layer student",
            f"give --init-layers one teacher layer (0..{t_layers - 1}) per student layer, or a full --layer-map",
        )
    was_training = teacher.training
    teacher.eval()
    try:
        ids, m = mx.array(input_ids), mx.array(mask)
        out = teacher(ids, m, output_hidden_states=True)
        real = np.asarray(mask, dtype=bool)
        hidden = [np.abs(np.array(h, dtype=np.float32)[real]).mean(axis=0) for h in out.hidden_states]
        channels = _top(np.mean(hidden, axis=0), student.hidden_size)
        additive = additive_mask(m, out.hidden_states[0].dtype)
        heads, old_dim, new_dim = teacher.config.num_attention_heads, teacher.config.head_dim, student.head_dim
        qk, v, neurons = [], [], []
        for j in layers:
            layer, x = teacher.layers[j], out.hidden_states[j]
            attention = layer.attention.self
            q, k, val = (
                np.array(proj(x), dtype=np.float32)[real] for proj in (attention.query, attention.key, attention.value)
            )
            score = np.abs(q * k).mean(axis=0).reshape(heads, old_dim)
            out_norm = np.linalg.norm(np.array(layer.attention.output.dense.weight, dtype=np.float32), axis=0)
            value = (np.abs(val).mean(axis=0) * out_norm).reshape(heads, old_dim)
            qk.append(np.stack([_top(row, new_dim) for row in score]))
            v.append(np.stack([_top(row, new_dim) for row in value]))
            attended, _ = layer.attention(x, additive, False)
            inner = np.array(layer.intermediate(attended), dtype=np.float32)[real]
            down_norm = np.linalg.norm(np.array(layer.output.dense.weight, dtype=np.float32), axis=0)
            neurons.append(_top(np.abs(inner).mean(axis=0) * down_norm, student.intermediate_size))
    finally:
        teacher.train(was_training)
    return ShrinkPlan(list(layers), channels, qk, v, neurons)


def _top(importance: np.ndarray, count: int) -> np.ndarray:
    return np.sort(np.argsort(-importance, kind="stable")[:count])


def shrink_from_teacher(
    student: BertForSequenceClassification,
    teacher: BertForSequenceClassification,
    plan: ShrinkPlan,
    keep: np.ndarray | None = None,
) -> None:
    """Load the teacher's weights, cut to `plan`, into `student` (`keep`: a pruned vocabulary's rows)."""
    t = {name: np.array(value, dtype=np.float32) for name, value in tree_flatten(teacher.parameters())}
    c = plan.channels
    heads, old_dim = teacher.config.num_attention_heads, teacher.config.head_dim
    new_dim = student.config.head_dim
    scale = np.sqrt(new_dim / old_dim)
    w: dict[str, np.ndarray] = {}
    e = "bert.embeddings."
    words = t[e + "word_embeddings.weight"]
    w[e + "word_embeddings.weight"] = (words if keep is None else words[keep])[:, c]
    rows = student.config.max_position_embeddings
    w[e + "position_embeddings.weight"] = t[e + "position_embeddings.weight"][:rows, c]
    w[e + "token_type_embeddings.weight"] = t[e + "token_type_embeddings.weight"][: student.config.type_vocab_size, c]
    for part in ("weight", "bias"):
        w[e + f"LayerNorm.{part}"] = t[e + f"LayerNorm.{part}"][c]
    for i, j in enumerate(plan.layers):
        src, dst = f"bert.encoder.layer.{j}.", f"bert.encoder.layer.{i}."
        qk = (plan.qk[i] + old_dim * np.arange(heads)[:, None]).ravel()  # flat teacher dims, head by head
        v = (plan.v[i] + old_dim * np.arange(heads)[:, None]).ravel()
        for name, dims, factor in (("query", qk, scale), ("key", qk, 1.0), ("value", v, 1.0)):
            p = f"attention.self.{name}."
            w[dst + p + "weight"] = t[src + p + "weight"][dims][:, c] * factor
            w[dst + p + "bias"] = t[src + p + "bias"][dims] * factor
        n = plan.neurons[i]
        for block, inner in (("attention.output.", v), ("output.", n)):
            w[dst + block + "dense.weight"] = t[src + block + "dense.weight"][c][:, inner]
            w[dst + block + "dense.bias"] = t[src + block + "dense.bias"][c]
            for part in ("weight", "bias"):
                w[dst + block + f"LayerNorm.{part}"] = t[src + block + f"LayerNorm.{part}"][c]
        w[dst + "intermediate.dense.weight"] = t[src + "intermediate.dense.weight"][n][:, c]
        w[dst + "intermediate.dense.bias"] = t[src + "intermediate.dense.bias"][n]
    w["bert.pooler.dense.weight"] = t["bert.pooler.dense.weight"][c][:, c]
    w["bert.pooler.dense.bias"] = t["bert.pooler.dense.bias"][c]
    w["classifier.weight"] = t["classifier.weight"][:, c]
    w["classifier.bias"] = t["classifier.bias"]
    student.load_weights([(name, mx.array(value)) for name, value in w.items()], strict=True)


def selection_matrix(channels: np.ndarray, teacher_width: int) -> np.ndarray:
    """(teacher_width, len(channels)) weight of a Linear that puts student channel i back at channels[i]:
    the natural start for the hidden-state projection of a student cut from its teacher."""
    out = np.zeros((teacher_width, len(channels)), dtype=np.float32)
    out[channels, np.arange(len(channels))] = 1.0
    return out
