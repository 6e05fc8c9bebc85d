"""The prompt a local LLM gets. An instruct model (one with a chat template): the class name, a few
real examples, what to write back. A base model (none): the examples as the start of a list, one per
"- " line, which it continues; it writes lines of the same kind, which is what a base model does well."""

from __future__ import annotations

import random

from mlx_edge.augment.dedup import has_cjk

# Recorded verbatim in the output's manifest: a change here is a different setup.
PROMPT_TEMPLATE = (
    'You write training data for a text classifier. The class is "{label}".\n'
    "Real examples of this class:\n"
    "{examples}\n"
    "\n"
    'Write {count} new examples of the class "{label}". Use the same language and style as the real '
    "examples: similar length, similar wording, the same kind of content.{language} Do not copy the "
    "examples. Answer with one example per line, with no numbering, no quotes and no explanations."
)


# A base model's prompt: each example on a "- " line, then the "- " of the line it is to write.
LIST_TEMPLATE = "- {example}\n ... - {example}\n- "


def build_list_prompt(examples: list[str]) -> str:
    """The start of a list of `examples` for a base model to continue (one line each, whitespace folded)."""
    return "".join(f"- {' '.join(t.split())}\n" for t in examples) + "- "


def language_hint(examples: list[str]) -> str:
    """An explicit language instruction: small models drift into English unless told."""
    cjk = sum(has_cjk(t) for t in examples)
    if cjk == len(examples):
        return " Write them in Chinese."
    if cjk:
        return " Mix languages the way the real examples do."
    return ""


def build_prompt(label: str, examples: list[str], count: int) -> str:
    """The user message asking for `count` new examples of `label`, shown `examples`."""
    shown = "\n".join(f"- {' '.join(t.split())}" for t in examples)
    return PROMPT_TEMPLATE.format(label=label, examples=shown, count=count, language=language_hint(examples))


def pick_shots(seeds: list[str], shots: int, rng: random.Random) -> list[str]:
    """A different random handful of seeds for each prompt (more variety in the answers), all of one
    script when the class has two (CJK or not, drawn in proportion): a prompt then carries one clear
    language instruction, which small models follow far better than "mix languages"."""
    cjk = [t for t in seeds if has_cjk(t)]
    if cjk and len(cjk) < len(seeds):
        other = [t for t in seeds if not has_cjk(t)]
        seeds = cjk if rng.random() < len(cjk) / len(seeds) else other
    return rng.sample(seeds, min(shots, len(seeds)))
