"""Where a distill step's teacher outputs come from: a targets cache (from `teacher label`) or the
teacher's live forward on the same CPU streams. A provider is `provide(rows, input_ids, mask)` -> a
dict with logits, hidden (list), attention (list) and embedding; `mlx-edge bench` uses the same ones.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from mlx_edge.errors import DistillError
from mlx_edge.models.prune import VocabPlan
from mlx_edge.runtime.cpu_streams import sharded_forward
from mlx_edge.targets import text_hash


def to_teacher_ids(provider, plan: VocabPlan):
    """A live teacher reads its own ids: the student's batch mapped back through the kept rows."""
    keep = plan.keep.astype(np.int32)

    def provide(rows, input_ids, mask):
        return provider(rows, keep[input_ids], mask)

    return provide


def cache_targets(cache, texts, mapping, terms_on, targets_dir):
    hashes = [text_hash(t) for t in texts]
    row_of = cache.row_of_hash()
    missing = sum(h not in row_of for h in hashes)
    if missing:
        raise DistillError(
            f"{missing} of {len(texts)} training texts are not in the targets cache {targets_dir}",
            "label the same training file(s) and --unlabeled files: mlx-edge teacher label --data ... --unlabeled ...",
        )
    rows_in_cache = np.array([row_of[h] for h in hashes])
    logits = cache.load(("logits",))["logits"]
    hidden_have, attention_have = cache.available()
    hidden_keys = [f"hidden.{mapping[i] + 1}" for i in sorted(mapping)] if "hidden" in terms_on else []
    attention_keys = [f"attention.{mapping[i] + 1}" for i in sorted(mapping)] if "attention" in terms_on else []
    embedding_keys = ["hidden.0"] if "embedding" in terms_on else []
    needed_hidden = sorted({int(k.split(".")[1]) for k in hidden_keys + embedding_keys} - set(hidden_have))
    needed_attention = sorted({int(k.split(".")[1]) for k in attention_keys} - set(attention_have))
    if needed_hidden or needed_attention:
        flags = (f" --hidden-layers {','.join(map(str, needed_hidden))}" if needed_hidden else "") + (
            f" --attention-layers {','.join(map(str, needed_attention))}" if needed_attention else ""
        )
        raise DistillError(
            f"the targets cache lacks teacher layers these losses need (hidden {needed_hidden}, "
            f"attention {needed_attention})",
            f"re-label with{flags}, or set those loss weights to 0",
        )

    def provide(rows, input_ids, mask):
        cache_rows = rows_in_cache[rows]
        width = input_ids.shape[1]
        got = cache.gather(cache_rows, width, hidden_keys + attention_keys + embedding_keys)
        return {
            "logits": logits[cache_rows],
            "hidden": [got[k] for k in hidden_keys],
            "attention": [got[k] for k in attention_keys],
            "embedding": got["hidden.0"] if embedding_keys else None,
        }

    return provide


def live_targets(teacher_model, mapping, terms_on, shards: int):
    """The teacher's outputs for a batch, computed lazily (the loop evaluates them) on `shards` CPU streams."""

    order = sorted(mapping)
    want_hidden = bool(terms_on & {"hidden", "embedding"})
    want_attention = "attention" in terms_on

    def provide(rows, input_ids, mask):
        out = sharded_forward(
            teacher_model,
            mx.array(input_ids),
            mx.array(mask),
            shards,
            output_hidden_states=want_hidden,
            output_attentions=want_attention,
        )
        hidden = [out.hidden_states[mapping[i] + 1] for i in order] if "hidden" in terms_on else []
        attention = [out.attentions[mapping[i]] for i in order] if want_attention else []
        embedding = out.hidden_states[0] if "embedding" in terms_on else None
        return {
            "logits": mx.stop_gradient(out.logits),
            "hidden": hidden,
            "attention": attention,
            "embedding": embedding,
        }

    return provide
