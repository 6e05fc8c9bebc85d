"""`augment(...)`: new labeled examples from seeds, appended to a JSONL file round by round.

One round: prompt the LLM for every class still short of `per_class` (or make token edits of the
seeds when no LLM is given), parse the answers, drop duplicates and seed copies, let the teacher
drop what it disagrees with or doubts, keep at most `per_class` per class, append, save state.
What a round parsed but did not keep (the teacher's rejects, the surplus over `per_class`; not the
duplicates) goes to a second file beside the output, one text per line: transfer text, which the
teacher labels softly and the student learns without a gold label (`transfer_path`).
The state file next to the output makes an interrupted run continue where it stopped; it also
holds the counts the report is made of (per class, per language, and the generator's tokens,
seconds and peak memory), so a resumed run reports the whole run.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from mlx_edge.augment.adapter import check_adapter
from mlx_edge.augment.clean import TeacherJudge
from mlx_edge.augment.dedup import Deduper
from mlx_edge.augment.fallback import propose_edits
from mlx_edge.augment.generate import Generator, check_llm, load_generator, resolve_llm
from mlx_edge.augment.parse import parse_answer, parse_continuation
from mlx_edge.augment.prompt import LIST_TEMPLATE, PROMPT_TEMPLATE, build_list_prompt, build_prompt, pick_shots
from mlx_edge.augment.report import COLUMNS as COLUMNS  # re-exported: the table's columns, read by tests
from mlx_edge.augment.report import AugmentResult, ClassCounts, GeneratorStats, measure_generation
from mlx_edge.data import LabelMap, language_of, read_labeled
from mlx_edge.errors import AugmentError, AugmentMismatch, ConfigError, DataError
from mlx_edge.fileio import atomic_write_json, refuse_overwriting_inputs
from mlx_edge.manifest import file_fingerprint, versions
from mlx_edge.progress import progress_bar
from mlx_edge.settings import AUGMENT, AUGMENT_ANSWER_TOKENS, AUGMENT_LIST_TOKENS
from mlx_edge.teacher.source import check_local_model, file_hash_of_weights


def sidecar_paths(out: Path) -> tuple[Path, Path]:
    """The manifest and the resume state that live next to the output file."""
    return out.with_name(out.name + ".manifest.json"), out.with_name(out.name + ".state.json")


def transfer_path(out: Path) -> Path:
    """The texts the rounds parsed but did not keep, one per line, beside the output file: an unlabeled
    file for `teacher label` and `distill` (`--unlabeled`), which the pipeline adds to its transfer set."""
    return out.with_name(out.name + ".transfer.txt")


def augment(
    *,
    seeds: Path,
    out: Path,
    per_class: int,
    llm: str | None = None,
    adapter: Path | None = None,
    generator: Generator | None = None,
    classes: list[str] | None = None,
    teacher: Path | None = None,
    min_confidence: float = AUGMENT.min_confidence,
    relabel: bool = AUGMENT.relabel,
    shots: int = AUGMENT.shots,
    per_prompt: int = AUGMENT.per_prompt,
    batch_size: int = AUGMENT.batch_size,
    max_rounds: int = AUGMENT.max_rounds,
    max_tokens: int | None = AUGMENT.max_tokens,
    temperature: float = AUGMENT.temperature,
    top_p: float = AUGMENT.top_p,
    seed: int = AUGMENT.seed,
    near_duplicate: float = AUGMENT.near_duplicate,
    min_chars: int = AUGMENT.min_chars,
    max_chars: int = AUGMENT.max_chars,
    text_column: str | None = None,
    label_column: str | None = None,
    force: bool = False,
    progress: bool = True,
    on_round: Callable[[int, int], None] | None = None,
) -> AugmentResult:
    """Write up to `per_class` new examples per class of `seeds` to `out` (JSONL {"text","label"}).

    The LLM is `generator` (any object with `.name`, `.tokens` and `.generate(prompts, ...)`) or `llm`
    (a built-in name such as smollm2-135m-instruct, an mlx-lm directory or a hub id); with neither,
    token edits of the seeds. `adapter` is a LoRA adapter directory of `llm` (`augment adapt`).
    `on_round(round, kept)` is called after each round has been saved.
    """
    seeds, out = Path(seeds), Path(out)
    if per_class < 1:
        raise DataError(f"--per-class must be at least 1, got {per_class}")
    by_class = _read_seeds(seeds, classes, text_column, label_column)
    classes = list(by_class)
    method = "llm" if (llm is not None or generator is not None) else "edits"
    llm_name = generator.name if generator is not None else llm
    setup = {
        "seeds": file_fingerprint(seeds),
        "classes": classes,
        "per_class": per_class,
        "method": method,
        "llm": llm_name,
        "prompt_template": PROMPT_TEMPLATE if method == "llm" else None,
        "shots": shots,
        "per_prompt": per_prompt,
        "batch_size": batch_size,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "near_duplicate": near_duplicate,
        "min_chars": min_chars,
        "max_chars": max_chars,
        "teacher": _teacher_setup(teacher),
        "min_confidence": min_confidence,
        "relabel": relabel,
    }
    if method == "llm" and generator is None:
        check_llm(llm)
    if adapter is not None:  # checked against --llm before anything is written; a new adapter is a new setup
        if llm is None:
            raise ConfigError("--adapter needs --llm: it is a LoRA adapter of that model", "pass --llm too")
        setup["adapter"] = check_adapter(Path(adapter), llm, progress=progress)
    _check_writable(out)
    if force:  # --force replaces --out: never when it is one of the inputs
        refuse_overwriting_inputs(out, seeds, teacher, llm if llm and Path(llm).exists() else None, adapter)
    manifest_path, state_path = sidecar_paths(out)
    state = _start(out, manifest_path, state_path, setup, force)
    resumed = state["round"] > 0
    counts = {c: ClassCounts(**state["counts"].get(c, {})) for c in classes}
    stats = GeneratorStats(**state.get("generator", {}))
    deduper = _deduper(by_class, out, near_duplicate, near_seeds=method == "llm")

    started, new = time.perf_counter(), 0
    short = [c for c in classes if counts[c].kept < per_class]
    if short and state["round"] < max_rounds:
        if method == "llm" and generator is None:
            with_adapter = {} if adapter is None else {"adapter": Path(adapter)}  # stand-in loaders take a name only
            generator = load_generator(resolve_llm(llm, progress=progress), **with_adapter)
        judge = None
        if teacher is not None:
            judge = TeacherJudge(teacher, classes=classes)
        _write_manifest(manifest_path, setup, generator, counts, stats, state["round"], done=False)
        bar = progress_bar(
            per_class * len(classes),
            desc="augment",
            unit="ex",
            enabled=progress,
            initial=sum(c.kept for c in counts.values()),
        )
        while short and state["round"] < max_rounds:
            number = state["round"]
            rng = random.Random(f"{seed}:{number}")  # a resumed run makes the same prompts as one that never stopped
            if method == "llm":
                candidates = _llm_round(
                    generator,
                    stats,
                    counts,
                    by_class,
                    short,
                    rng,
                    number,
                    shots=shots,
                    per_prompt=per_prompt,
                    batch_size=batch_size,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    top_p=top_p,
                    seed=seed,
                    min_chars=min_chars,
                    max_chars=max_chars,
                )
            else:
                candidates = [
                    (c, t)
                    for c in short
                    for t in propose_edits(by_class[c], max(per_prompt, per_class - counts[c].kept), rng)
                    if min_chars <= len(t) <= max_chars
                ]
            rows, rest = _filter(
                candidates,
                counts,
                deduper,
                judge,
                classes=classes,
                per_class=per_class,
                min_confidence=min_confidence,
                relabel=relabel,
                near_duplicate=near_duplicate,
            )
            state = _append(out, state_path, state, rows, rest, counts, stats)
            new += len(rows)
            if bar is not None:
                bar.update(len(rows))
            if on_round is not None:
                on_round(number, len(rows))
            short = [c for c in classes if counts[c].kept < per_class]
        if bar is not None:
            bar.close()
    _write_manifest(manifest_path, setup, generator, counts, stats, state["round"], done=not short)
    return AugmentResult(
        str(out),
        str(manifest_path),
        method,
        counts,
        per_class,
        state["round"],
        new,
        resumed,
        time.perf_counter() - started,
        short,
        generator=stats,
        llm=llm_name,
        adapter=setup.get("adapter"),
        teacher=None if teacher is None else str(teacher),
        min_confidence=min_confidence,
        relabel=relabel,
        transfer=str(transfer_path(out)),
        transfer_texts=_lines(transfer_path(out)),
    )


def _lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


# ------------------------------------------------------------------------------------------ inputs


def _read_seeds(path: Path, classes: list[str] | None, text_column, label_column) -> dict[str, list[str]]:
    """Seed texts by class, in label-map order; every requested class must have at least one."""
    data = read_labeled(path, text_column=text_column, label_column=label_column)
    by_class: dict[str, list[str]] = {}
    for text, label in zip(data.texts, data.labels):
        by_class.setdefault(label, []).append(text)
    if classes:
        missing = [c for c in classes if c not in by_class]
        if missing:
            raise DataError(
                f"class {', '.join(map(repr, missing))} has no examples in {path} "
                f"(classes there: {', '.join(LabelMap.from_data(data).labels)})",
                "add a few real examples of it to the seeds, or leave it out of --classes",
            )
        return {c: by_class[c] for c in dict.fromkeys(classes)}
    return {c: by_class[c] for c in LabelMap.from_data(data).labels}


def _teacher_setup(teacher: Path | None) -> dict | None:
    if teacher is None:
        return None

    check_local_model(Path(teacher))
    return {"path": str(Path(teacher).resolve()), "weights_sha256": file_hash_of_weights(Path(teacher))}


def _check_writable(out: Path) -> None:
    if out.is_dir():
        raise AugmentError(f"--out {out} is a directory", "pass a file path such as synthetic.jsonl")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
        os.close(fd)
        os.unlink(probe)
        if out.exists():
            with open(out, "a", encoding="utf-8"):
                pass
    except OSError as exc:
        raise AugmentError(f"cannot write {out}: {exc.strerror or exc}", "choose a writable --out path") from None


# ----------------------------------------------------------------------------------------- resume


def _start(out: Path, manifest_path: Path, state_path: Path, setup: dict, force: bool) -> dict:
    """The saved state of this very setup (resume), or a fresh one; `out` (and the transfer texts) cut
    back to what it records."""
    transfer = transfer_path(out)
    if force:
        for path in (out, transfer, manifest_path, state_path):
            path.unlink(missing_ok=True)
    if state_path.is_file():
        state, manifest = _read_json(state_path), _read_json(manifest_path) if manifest_path.is_file() else {}
        old = manifest.get("setup") or {}
        if old != setup:
            changed = sorted(k for k in set(setup) | set(old) if old.get(k) != setup.get(k))
            raise AugmentMismatch(
                f"{out} holds an augment run with other settings (differs in: {', '.join(changed)})",
                "re-run the same command to continue it, or pass --force to start over",
            )
        size = out.stat().st_size if out.exists() else 0
        if size < state["out_bytes"]:
            raise AugmentError(
                f"{out} is shorter than its state file records ({size} < {state['out_bytes']} bytes)",
                "it was edited or truncated: pass --force to start over",
            )
        if size > state["out_bytes"]:  # rows of a round that was interrupted before its state was saved
            with open(out, "r+b") as f:
                f.truncate(state["out_bytes"])
        kept = state.get("transfer_bytes", 0)  # a state written before the transfer file: none yet
        if not transfer.is_file() or transfer.stat().st_size < kept:  # its texts are a by-product: start them again
            transfer.write_text("", encoding="utf-8")
            state["transfer_bytes"] = 0
        elif transfer.stat().st_size > kept:
            with open(transfer, "r+b") as f:
                f.truncate(kept)
        return state
    if out.exists() and out.stat().st_size > 0:
        raise AugmentError(
            f"{out} exists and was not written by mlx-edge augment (no {state_path.name})",
            "choose another --out, or pass --force to replace it",
        )
    out.write_text("", encoding="utf-8")
    transfer.write_text("", encoding="utf-8")
    state = {"round": 0, "out_bytes": 0, "transfer_bytes": 0, "counts": {}}
    atomic_write_json(manifest_path, {"kind": "augment", "setup": setup})
    atomic_write_json(state_path, state)
    return state


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AugmentError(f"{path} is unreadable ({exc})", "pass --force to start over") from None


def _deduper(by_class: dict[str, list[str]], out: Path, threshold: float, *, near_seeds: bool) -> Deduper:
    """Seeds plus every example already written (so a resumed run dedups exactly as before)."""
    deduper = Deduper(threshold, near_seeds=near_seeds)
    for texts in by_class.values():
        for text in texts:
            deduper.add(text, seed=True)
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            if line.strip():
                deduper.add(json.loads(line)["text"])
    return deduper


def _append(
    out: Path,
    state_path: Path,
    state: dict,
    rows: list[tuple[str, str]],
    rest: list[str],
    counts: dict[str, ClassCounts],
    stats: GeneratorStats,
) -> dict:
    """Append a round's rows (and its transfer texts), then record it: a crash in between is cut back on resume."""
    transfer = transfer_path(out)
    for path, text in (
        (out, "".join(json.dumps({"text": t, "label": c}, ensure_ascii=False) + "\n" for c, t in rows)),
        (transfer, "".join(" ".join(t.split()) + "\n" for t in rest)),  # one line each
    ):
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    state = {
        "round": state["round"] + 1,
        "out_bytes": out.stat().st_size,
        "transfer_bytes": transfer.stat().st_size,
        "counts": {c: asdict(v) for c, v in counts.items()},
        "generator": asdict(stats),
    }
    atomic_write_json(state_path, state)
    return state


def _write_manifest(
    path: Path,
    setup: dict,
    generator,
    counts: dict[str, ClassCounts],
    stats: GeneratorStats,
    rounds: int,
    done: bool,
) -> None:
    manifest = _read_json(path) if path.is_file() else {}
    manifest.update(
        {
            "kind": "augment",
            "updated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "versions": versions(),
            "setup": setup,
            "rounds": rounds,
            "complete": done,
            "report": {c: asdict(v) for c, v in counts.items()},
            "generator": asdict(stats) if setup["method"] == "llm" else None,
        }
    )
    if generator is not None:
        manifest["chat_template"] = bool(getattr(generator, "chat_template", False))
        manifest["prompt"] = LIST_TEMPLATE if getattr(generator, "completion", False) else PROMPT_TEMPLATE
    atomic_write_json(path, manifest)


# ------------------------------------------------------------------------------------------ rounds


def _llm_round(
    generator,
    stats,
    counts,
    by_class,
    short,
    rng,
    number,
    *,
    shots,
    per_prompt,
    batch_size,
    max_tokens,
    temperature,
    top_p,
    seed,
    min_chars,
    max_chars,
) -> list[tuple[str, str]]:
    """One batch of prompts spread over the classes still short; (asked class, text) candidates."""
    slots = [short[(number + i) % len(short)] for i in range(max(batch_size, 1))]
    completion = getattr(generator, "completion", False)
    if max_tokens is None:  # a few lines of a list, or a whole answer
        max_tokens = AUGMENT_LIST_TOKENS if completion else AUGMENT_ANSWER_TOKENS
    if completion:  # a base model continues a list of the class's examples (the class is not named)
        prompts = [build_list_prompt(pick_shots(by_class[c], shots, rng)) for c in slots]
    else:
        prompts = [build_prompt(c, pick_shots(by_class[c], shots, rng), per_prompt) for c in slots]
    answers = measure_generation(
        stats,
        generator,
        lambda: generator.generate(
            prompts, max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed * 1_000_003 + number
        ),
    )
    for c in slots:
        counts[c].answers += 1

    def candidates(label: str, answer: str) -> list[str]:
        if completion:
            return parse_continuation(answer, min_chars=min_chars, max_chars=max_chars)
        return parse_answer(answer, label=label, min_chars=min_chars, max_chars=max_chars)

    return [(c, t) for c, answer in zip(slots, answers) for t in candidates(c, answer)]


def _filter(
    candidates, counts, deduper, judge, *, classes, per_class, min_confidence, relabel, near_duplicate
) -> tuple[list[tuple[str, str]], list[str]]:
    """Dedup, teacher check and balancing of one round's candidates: the rows kept, and the texts not kept
    that were no duplicates (the teacher's rejects, the surplus: transfer text). Updates `counts` and `deduper`."""
    fresh = Deduper(near_duplicate)  # duplicates within this round
    pending = []
    for label, text in candidates:
        counts[label].generated += 1
        if deduper.check(text) or fresh.check(text):
            counts[label].duplicates += 1
            continue
        fresh.add(text)
        pending.append((label, text))
    if judge is not None and pending:
        verdicts = list(zip(*judge.judge([t for _, t in pending])))
    else:
        verdicts = [(label, 1.0) for label, _ in pending]
    rows, rest = [], []
    for (label, text), (said, confidence) in zip(pending, verdicts):
        final = label
        if said != label:
            counts[label].disagreements += 1
            if not relabel or said not in counts or confidence < min_confidence:
                rest.append(text)
                continue
            final = said
            counts[label].relabeled += 1
        elif confidence < min_confidence:
            counts[label].low_confidence += 1
            rest.append(text)
            continue
        if counts[final].kept >= per_class:
            counts[label].surplus += 1
            rest.append(text)
            continue
        counts[final].kept += 1
        language = language_of(text)
        counts[final].languages[language] = counts[final].languages.get(language, 0) + 1
        deduper.add(text)
        rows.append((final, text))
    return rows, rest
