"""Distillation losses, each a pure function of MLX arrays (tested against NumPy/PyTorch references).

Masks are (B, L) 1/0 arrays: padded positions never count. Means are over real tokens only.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


def soft_target_kl(student_logits: mx.array, teacher_logits: mx.array, temperature: float) -> mx.array:
    """KL(teacher || student) of the temperature-softened distributions, batch mean, times T².

    The T² factor (Hinton et al.) keeps the gradient scale independent of T, so the weight of this
    term means the same thing at any temperature.
    """
    t = temperature
    log_p_teacher = nn.log_softmax(teacher_logits.astype(mx.float32) / t, axis=-1)
    log_p_student = nn.log_softmax(student_logits / t, axis=-1)
    kl = (mx.exp(log_p_teacher) * (log_p_teacher - log_p_student)).sum(axis=-1)
    return kl.mean() * (t * t)


def hard_label_ce(student_logits: mx.array, labels: mx.array) -> mx.array:
    """Cross-entropy with the gold labels, mean over the rows that have one: a transfer-set row (label
    NO_LABEL, -1) is learned from the teacher alone. 0 for a batch with no gold row."""
    gold = labels >= 0
    ce = nn.losses.cross_entropy(student_logits, mx.maximum(labels, 0), reduction="none")
    return mx.where(gold, ce, 0.0).sum() / mx.maximum(gold.sum(), 1).astype(ce.dtype)


def hidden_mse(
    student_hidden: mx.array, teacher_hidden: mx.array, mask: mx.array, projection: nn.Module | None = None
) -> mx.array:
    """MSE between (projected) student and teacher hidden states (B, L, H) over real tokens."""
    if projection is not None:  # learned map from the student's width to the teacher's
        student_hidden = projection(student_hidden)
    m = mask.astype(mx.float32)[..., None]
    # mx.square, not ** 2: MLX's CPU power is a scalar libm powf, in the forward and backward pass alike
    diff = mx.square(student_hidden - teacher_hidden.astype(mx.float32)) * m
    return diff.sum() / (m.sum() * student_hidden.shape[-1])


def _pair_mask(mask: mx.array) -> mx.array:
    m = mask.astype(mx.float32)
    return m[:, None, :, None] * m[:, None, None, :]  # (B, 1, L, L): real query x real key


def _match_heads(student_attn: mx.array, teacher_attn: mx.array) -> tuple[mx.array, mx.array]:
    """Different head counts: compare the head-averaged maps (B, 1, L, L)."""
    if student_attn.shape[1] == teacher_attn.shape[1]:
        return student_attn, teacher_attn
    return student_attn.mean(axis=1, keepdims=True), teacher_attn.mean(axis=1, keepdims=True)


def attention_mse(student_attn: mx.array, teacher_attn: mx.array, mask: mx.array) -> mx.array:
    """MSE between attention probability maps (B, heads, L, L) over real query/key pairs."""
    s, t = _match_heads(student_attn, teacher_attn.astype(mx.float32))
    pairs = _pair_mask(mask)
    diff = mx.square(s - t) * pairs
    return diff.sum() / (pairs.sum() * s.shape[1])


def attention_kl(student_attn: mx.array, teacher_attn: mx.array, mask: mx.array, eps: float = 1e-8) -> mx.array:
    """KL(teacher row || student row) per real query, averaged over heads and real queries."""
    s, t = _match_heads(student_attn, teacher_attn.astype(mx.float32))
    pairs = _pair_mask(mask)
    kl = (t * (mx.log(t + eps) - mx.log(s + eps)) * pairs).sum(axis=-1)  # (B, h, L)
    queries = mask.astype(mx.float32)[:, None, :]
    return (kl * queries).sum() / (queries.sum() * s.shape[1])
