"""The training pairs `adapt` teaches the generator with: augment's own request, answered with real rows.

Each pair's prompt is `build_prompt(label, shots, n)`, the very user message augment sends (the same
template, shots of one script, the same language hint), and its answer is n real examples of the
class, one per line: what augment then parses. For a base model (no chat template) the prompt is the
list augment sends it (`build_list_prompt(shots)`) and the answer the list's next n lines. An adapted
model is trained on exactly the requests it will get. Each row is an answer line once per epoch; the
shots are other rows of its class.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mlx_edge.augment.dedup import has_cjk
from mlx_edge.augment.prompt import build_list_prompt, build_prompt


@dataclass(frozen=True)
class Pair:
    """One request and its answer, kept apart so that a pair too long for --max-seq-length can shrink."""

    label: str
    shots: tuple[str, ...]
    answer: tuple[str, ...]

    def render(self, *, completion: bool = False) -> dict:
        """The prompt/completion record mlx-lm's CompletionsDataset reads; `completion`: a base model's, the
        answer continuing the prompt's list ("x\n- y\n": each line finished, as augment keeps only those)."""
        lines = [" ".join(t.split()) for t in self.answer]  # a text's own newline would read as two examples
        if completion:
            return {"prompt": build_list_prompt(list(self.shots)), "completion": "\n- ".join(lines) + "\n"}
        return {"prompt": build_prompt(self.label, list(self.shots), len(lines)), "completion": "\n".join(lines)}

    def shrink(self) -> list[Pair]:
        """Shorter pairs covering the same answer rows: one shot fewer, else the answer split in two;
        [] when a one-line answer with one shot is still too long."""
        if len(self.shots) > 1:
            return [Pair(self.label, self.shots[:-1], self.answer)]
        if len(self.answer) > 1:
            half = len(self.answer) // 2
            return [Pair(self.label, self.shots, self.answer[:half]), Pair(self.label, self.shots, self.answer[half:])]
        return []


def build_pairs(
    answers: dict[str, list[str]],
    context: dict[str, list[str]],
    *,
    shots: int,
    lines: int,
    rng: random.Random,
) -> list[Pair]:
    """Pairs whose answers are the rows of `answers` (each row once) and whose shots are drawn from
    `context` of the same class, never from the pair's own answer. With `context` the same rows
    (training), a class's answers take at most half its rows so the rest can be shown; a class
    with a single row gives no pair."""
    pairs = []
    for label, rows in answers.items():
        for script in (True, False):  # one script per prompt, as augment's pick_shots does
            group = [t for t in rows if has_cjk(t) == script]
            pool = [t for t in context.get(label, []) if has_cjk(t) == script]
            everything = context.get(label, [])
            rng.shuffle(group)
            # answers drawn from the shot pool itself (training) leave at least half of it to show
            size = min(lines, max(1, len(pool) // 2)) if set(group) <= set(pool) else lines
            for start in range(0, len(group), size):
                answer = group[start : start + size]
                taken = set(answer)
                shown = [t for t in pool if t not in taken] or [t for t in everything if t not in taken]
                if shown:
                    pairs.append(Pair(label, tuple(rng.sample(shown, min(shots, len(shown)))), tuple(answer)))
    return pairs


def fit(pairs: list[Pair], length, max_length: int) -> tuple[list[Pair], int]:
    """Pairs whose token `length(pair)` is at most `max_length` (shrunk where needed; mlx-lm would cut
    the answer off the end), and how many answer rows no pair could hold."""
    kept, dropped, todo = [], 0, list(pairs)
    while todo:
        pair = todo.pop()
        if length(pair) <= max_length:
            kept.append(pair)
            continue
        smaller = pair.shrink()
        dropped += 0 if smaller else len(pair.answer)
        todo.extend(smaller)
    kept.reverse()
    return kept, dropped
