"""Turn an LLM's free-form answer into candidate example texts.

Real answers mix numbered lists, bullets, quotes, a chatty preamble, JSON arrays or JSON lines,
code fences and blank lines; everything but the examples themselves is dropped.
"""

from __future__ import annotations

import json
import re

# "1.", "1)", "(1)", "1:", "1、", "#1", "-", "*", "•", "Example 3:", "例3：" at the start of a line.
_MARKER = re.compile(
    r"^\s*(?:(?:[-*•·‣▪–—](?=\s|$)"  # a bullet followed by a space (not "**bold**")
    r"|[(（]?\d{1,3}[.)\]:：、．）](?!\d)"  # 1. 1) (1) 1: 1、 but not "3.5%"
    r"|#\d{1,3}[.:]?"
    r"|(?:example|sample|例子?|示例)\s*\d{0,3}\s*[.:：)])\s*)+",
    re.IGNORECASE,
)
_QUOTES = [('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("「", "」"), ("『", "』"), ("«", "»"), ("`", "`")]
_TEXT_KEYS = ("text", "example", "sentence", "content")
# A preamble/closing line: ends with ":" or is a typical chat phrase, not an example.
_CHATTER = re.compile(
    r"^(?:here (?:are|is)|sure|certainly|of course|i hope|these examples|note:|以下是|好的|当然)", re.IGNORECASE
)


def parse_answer(answer: str, *, label: str | None = None, min_chars: int = 3, max_chars: int = 300) -> list[str]:
    """Candidate texts from one answer, in order; empty, too short and too long ones dropped."""
    texts = _from_json(answer)
    if texts is None:
        texts = [_clean_line(line, label) for line in answer.splitlines()]
    out = []
    for text in texts:
        text = " ".join(text.split())
        if "\ufffd" in text:  # bytes of a character cut by max tokens, or a broken decode
            continue
        if min_chars <= len(text) <= max_chars:
            out.append(text)
    return out


def parse_continuation(answer: str, *, min_chars: int = 3, max_chars: int = 300) -> list[str]:
    """Candidate texts from a base model's continuation of a "- " list (augment/prompt.py): the line it
    finished, then each further "- " line, up to the first line of another kind (it has left the list);
    a last line with no newline after it was cut by max tokens and is dropped."""
    lines = answer.split("\n")[:-1]  # the text after the last newline is unfinished (or empty)
    out = []
    for i, line in enumerate(lines):
        if i > 0:
            if not line.startswith("- "):
                break
            line = line[2:]
        text = " ".join(_unquote(line.strip()).split())
        if "\ufffd" not in text and min_chars <= len(text) <= max_chars:
            out.append(text)
    return out


def _from_json(answer: str) -> list[str] | None:
    """A JSON array (of strings or objects) or JSON lines; None when the answer is not JSON."""
    body = _strip_fence(answer.strip())
    if body.startswith("["):
        try:
            items = json.loads(body)
        except ValueError:
            return None
        return [t for t in map(_json_text, items) if t is not None] if isinstance(items, list) else None
    lines = [line.strip().rstrip(",") for line in body.splitlines() if line.strip()]
    if not lines or not all(line.startswith("{") for line in lines):
        return None
    texts = []
    for line in lines:
        try:
            text = _json_text(json.loads(line))
        except ValueError:
            continue  # one broken line (cut by max tokens) must not lose the others
        if text is not None:
            texts.append(text)
    return texts


def _json_text(item) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        for key in _TEXT_KEYS:
            if isinstance(item.get(key), str):
                return item[key]
    return None


def _strip_fence(text: str) -> str:
    if text.startswith("```"):
        lines = text.splitlines()[1:]
        if lines and lines[-1].strip().startswith("```"):
            lines = lines[:-1]
        return "\n".join(lines).strip()
    return text


def _clean_line(line: str, label: str | None) -> str:
    line = line.strip()
    preamble = line.endswith((":", "：")) and len(line) < 80
    if not line or line.startswith("```") or _CHATTER.match(line) or preamble:
        return ""
    line = _MARKER.sub("", line).strip()
    if label:  # "… (finance)", "… - finance", "Label: finance" trailing annotations
        line = re.sub(
            rf"\s*(?:[-–—|:]\s*|\()\s*(?:label\s*[:=]\s*)?{re.escape(label)}\s*\)?\s*$", "", line, flags=re.IGNORECASE
        )
    line = re.sub(r"^\*\*(.*)\*\*$", r"\1", line)  # markdown bold around a whole line
    return _unquote(line.strip().rstrip(",").strip())


def _unquote(text: str) -> str:
    for _ in range(2):  # '"“text”"' happens
        for left, right in _QUOTES:
            if len(text) >= 2 and text.startswith(left) and text.endswith(right):
                text = text[len(left) : -len(right)].strip()
    return text
