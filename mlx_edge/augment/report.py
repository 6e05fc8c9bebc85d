"""What an augment run did, in numbers: per class, per language, and the generator's speed and memory.

The path of one candidate: the LLM writes an answer (tokens), the answer is parsed into examples,
duplicates and seed copies go, the teacher rejects what it labels otherwise or doubts, classes are
balanced to --per-class, the rest is kept. Every count here is one step of that path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import mlx.core as mx

COLUMNS = ("generated", "duplicates", "disagreements", "low_confidence", "surplus", "kept")


@dataclass
class ClassCounts:
    """Per class: `generated` (examples parsed from the answers, or token edits proposed) and the drops
    count against the class asked for; `kept` is rows written, `languages` splits them by language."""

    generated: int = 0
    duplicates: int = 0  # exact or near copies of a kept example or of a seed
    disagreements: int = 0  # the teacher's label differs (with relabel: kept under it when confident)
    low_confidence: int = 0
    surplus: int = 0  # good examples beyond --per-class (balancing)
    kept: int = 0
    relabeled: int = 0  # of the disagreements, kept (or surplus) under the teacher's label (relabel)
    answers: int = 0  # LLM answers asked for this class (one per prompt)
    languages: dict[str, int] = field(default_factory=dict)  # kept rows by data.language_of


@dataclass
class GeneratorStats:
    """The LLM's work over a whole run (resumed sessions added up)."""

    answers: int = 0
    tokens: int = 0
    seconds: float = 0.0  # inside generate calls only
    peak_memory: int = 0  # bytes: MLX's peak while generating (the LLM, its caches, and a loaded teacher)
    weight_bytes: int = 0  # the LLM's parameters as loaded (float32 on the CPU, see generate.unpack_for_cpu)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def measure_generation(stats: GeneratorStats, generator, generate: Callable[[], list[str]]) -> list[str]:
    """Run `generate()` (one batch of the generator's answers) and add its tokens, time and peak to `stats`."""
    before = getattr(generator, "tokens", 0)
    mx.reset_peak_memory()
    start = time.perf_counter()
    answers = generate()
    stats.seconds += time.perf_counter() - start
    stats.tokens += getattr(generator, "tokens", 0) - before
    stats.answers += len(answers)
    stats.peak_memory = max(stats.peak_memory, int(mx.get_peak_memory()))
    stats.weight_bytes = getattr(generator, "weight_bytes", stats.weight_bytes)
    return answers


@dataclass
class AugmentResult:
    out: str
    manifest: str
    method: str
    classes: dict[str, ClassCounts]
    per_class: int
    rounds: int
    new_examples: int  # written by this run (the rest came from an earlier, interrupted run)
    resumed: bool
    seconds: float
    short: list[str] = field(default_factory=list)  # classes still below per_class (max rounds reached)
    generator: GeneratorStats = field(default_factory=GeneratorStats)  # the whole run, resumes included
    llm: str | None = None
    adapter: dict | None = None  # {"path", "sha256"} of the LoRA adapter on the LLM (augment adapt)
    teacher: str | None = None
    min_confidence: float = 0.0
    relabel: bool = False
    transfer: str | None = None  # the texts not kept, one per line (transfer text: api.transfer_path)
    transfer_texts: int = 0

    @property
    def complete(self) -> bool:
        return not self.short

    @property
    def examples_per_second(self) -> float:
        return self.new_examples / max(self.seconds, 1e-9)

    def total(self) -> ClassCounts:
        total = ClassCounts(**{col: sum(getattr(c, col) for c in self.classes.values()) for col in COLUMNS})
        total.answers = sum(c.answers for c in self.classes.values())
        total.relabeled = sum(c.relabeled for c in self.classes.values())
        for c in self.classes.values():
            for language, n in c.languages.items():
                total.languages[language] = total.languages.get(language, 0) + n
        return total

    def summary(self) -> dict:
        """The report as JSON-ready data (`mlx-edge augment --json`, the pipeline's report)."""
        return {
            "out": self.out,
            "manifest": self.manifest,
            "method": self.method,
            "llm": self.llm,
            "adapter": self.adapter,
            "rounds": self.rounds,
            "new_examples": self.new_examples,
            "resumed": self.resumed,
            "complete": self.complete,
            "short": self.short,
            "classes": {c: asdict(v) for c, v in self.classes.items()},
            "total": asdict(self.total()),
            "teacher": None
            if self.teacher is None
            else {"path": self.teacher, "min_confidence": self.min_confidence, "relabel": self.relabel},
            "generator": {**asdict(self.generator), "tokens_per_second": round(self.generator.tokens_per_second, 2)}
            if self.method == "llm"
            else None,
            "transfer": {"path": self.transfer, "texts": self.transfer_texts},
        }


def format_report(result: AugmentResult) -> str:
    """The per-class table the CLI prints."""
    width = max(8, *(len(c) for c in result.classes))
    names = [col.replace("_", "-") for col in COLUMNS]
    lines = [f"{'class':<{width}}" + "".join(f"  {name:>{len(name)}}" for name in names)]
    for label, c in [*result.classes.items(), ("total", result.total())]:
        cells = (f"  {getattr(c, col):>{len(name)}}" for col, name in zip(COLUMNS, names))
        lines.append(f"{label:<{width}}" + "".join(cells))
    return "\n".join(lines)


def format_details(result: AugmentResult) -> str:
    """What happened along the way, in a few lines: generator, parsing, the teacher's cut, languages."""
    t, g = result.total(), result.generator
    lines = []
    if result.method == "llm":
        adapter = f" + adapter {result.adapter['path']}" if result.adapter else ""
        lines.append(
            f"generator {result.llm}{adapter}: {g.answers} answers, {g.tokens} tokens in {g.seconds:.0f} s "
            f"({g.tokens_per_second:.1f} tokens/s); peak MLX memory {g.peak_memory / 1e6:.0f} MB "
            f"(the LLM's weights {g.weight_bytes / 1e6:.0f} MB)"
        )
        lines.append(f"parsed {t.generated} examples from the answers; {t.duplicates} duplicates or seed copies")
    else:
        lines.append(f"token edits: {t.generated} proposed; {t.duplicates} duplicates or seed copies")
    if result.teacher is None:
        lines.append("no teacher: nothing was checked for its label (pass --teacher to clean)")
    else:
        relabeled = f" ({t.relabeled} more kept under the teacher's label)" if result.relabel else ""
        lines.append(
            f"teacher rejected {t.disagreements - t.relabeled + t.low_confidence}: "
            f"{t.disagreements - t.relabeled} labeled otherwise{relabeled}, {t.low_confidence} below its "
            f"confidence threshold {result.min_confidence:.2f}"
        )
    lines.append(f"{t.surplus} over --per-class {result.per_class}; kept {t.kept}")
    if result.transfer_texts:
        lines.append(
            f"{result.transfer_texts} texts not kept are transfer text in {result.transfer} (no gold label: "
            "give it to teacher label and distill as --unlabeled; mlx-edge run does)"
        )
    languages = sorted(t.languages)
    if languages:
        lines.append("kept by language: " + ", ".join(f"{lang} {t.languages[lang]}" for lang in languages))
        for label, c in result.classes.items():
            lines.append(f"  {label}: " + ", ".join(f"{lang} {c.languages.get(lang, 0)}" for lang in languages))
    return "\n".join(lines)
