"""`mlx-edge run CONFIG.toml` and `mlx-edge demo`: the whole pipeline, one stage after another.

teacher train (or a given teacher) → augment (when configured) → teacher label → distill → export →
check. Each stage writes a directory in the workspace; `pipeline.json` there records a fingerprint of
each finished stage (its settings, its inputs' hashes, the upstream stages' fingerprints), so a re-run
skips stages that are up to date. Interrupted stages resume on their own (augment: after its last
round; label: after the last shard; distill: from its last checkpoint, to the same weights).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlx_edge import ladder
from mlx_edge.augment.api import augment as run_augment
from mlx_edge.augment.neighbours import EDITS_VERSION, write_teacher_edits
from mlx_edge.augment.report import AugmentResult, format_details
from mlx_edge.bundle.table import BundleRow, bundle_row
from mlx_edge.check import check_bundle
from mlx_edge.data import LabeledData, LabelMap, english_rows, language_of, read_labeled
from mlx_edge.datasets import WORDNET_SENTENCES, broad_english
from mlx_edge.distill.api import student_rows
from mlx_edge.distill.loop import LoopConfig
from mlx_edge.distill.student import parse_layer_map, student_config
from mlx_edge.errors import AugmentMismatch, ConfigError, DataError, DataWarning, ManifestError, SetupMismatch
from mlx_edge.fileio import atomic_write_json, atomic_write_text, disk_bytes, fingerprint
from mlx_edge.manifest import read_manifest
from mlx_edge.metrics import trivial_note
from mlx_edge.models.checkpoint import load_config
from mlx_edge.predict import predict_texts
from mlx_edge.settings import (
    BROAD_STEP_BUDGET,
    BROAD_TEXT,
    BROAD_TEXT_BELOW,
    BROAD_TEXT_SHARE,
    CONFIG_SECTIONS,
    DISTILL_LEARNING_RATE,
    EDITS_LEARNING_RATE,
    EDITS_STEP_BUDGET,
    PIPELINE,
    SELF_TRAIN_BELOW,
    TEACHER_EDITS,
    WORD_BAGS,
    DistillSettings,
    PipelineSettings,
)
from mlx_edge.teacher.label import label_targets
from mlx_edge.teacher.train import train_teacher
from mlx_edge.transfer import transfer_set

STATE_NAME = "pipeline.json"
AUGMENT_TRANSFER = "transfer.jsonl"  # in the augment stage's directory: what it did not keep, as transfer text


# The sections a config may have (settings.CONFIG_SECTIONS). A stage's section holds its settings class's
# fields (mlx_edge/settings.py), plus the few keys that only make sense in a pipeline.
NO_TEACHER = '[teacher] needs model = "ID_OR_DIR" (to fine-tune) or dir = "DIR" (already trained)'
SECTIONS = {name: set(extras) for name, (_, extras) in CONFIG_SECTIONS.items()}
STAGE_SETTINGS = {name: cls for name, (cls, _) in CONFIG_SECTIONS.items() if cls is not None}


@dataclass
class PipelineConfig:
    """Every stage's options, with the defaults `mlx-edge run` uses (see examples/pipeline.toml)."""

    out: Path
    train: Path
    dev: Path | None = None
    test: Path | None = None
    text_column: str | None = None
    label_column: str | None = None
    unlabeled: tuple[Path, ...] = ()  # a transfer set: text with no label (transfer.py)
    teacher_edits: int | str = "auto"  # new sentences per training row for the transfer set (transfer_counts)
    broad_text: int | str = "auto"  # sentences of broad English text for the transfer set (transfer_counts)
    unlabeled_column: str | None = None
    device: str = PIPELINE.device
    seed: int = PIPELINE.seed
    bundles: tuple[str, ...] = PIPELINE.bundles  # the ladder (mlx_edge/ladder.py): fp16, int8, int4, static
    teacher: dict[str, Any] = field(default_factory=dict)  # model | dir, epochs, batch_size, learning_rate, max_length
    augment: dict[str, Any] = field(default_factory=dict)  # per_class, llm, min_confidence, ...; empty: no stage
    label: dict[str, Any] = field(default_factory=dict)  # backend, batch_size, shard_size
    distill: dict[str, Any] = field(default_factory=dict)  # student, init, epochs, learning_rate, *_weight, ...
    export: dict[str, Any] = field(default_factory=dict)  # precision, quantize, seq_len, optimizer, ...
    check: dict[str, Any] = field(default_factory=lambda: {"enabled": True})

    @classmethod
    def from_toml(cls, path: Path) -> PipelineConfig:
        import tomllib  # lazy: only config files need it

        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config {path} does not exist", "write one with: mlx-edge init CONFIG --train FILE")
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is not valid TOML ({exc})") from None
        base = path.parent
        data, run = raw.get("data", {}), raw.get("pipeline", {})
        unknown = sorted(set(raw) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"{path}: unknown section(s) {', '.join(unknown)}", f"use {', '.join(SECTIONS)}")
        for section, extra in SECTIONS.items():
            values = raw.get(section, {})
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: [{section}] must be a table of settings")
            renamed = getattr(STAGE_SETTINGS.get(section), "RENAMED", {})  # an older release's keys
            old = sorted(values.keys() & renamed.keys())
            if old:  # said before the unknown-key check, which would only say "unknown setting"
                new, meaning = renamed[old[0]]
                raise ConfigError(
                    f"{path}: [{section}] {old[0]} was renamed in mlx-edge 0.2", f"write {new} = ..., {meaning}"
                )
            if section in STAGE_SETTINGS:  # every other key must be a setting of the stage (checked, typed)
                STAGE_SETTINGS[section].from_section(
                    {k: v for k, v in values.items() if k not in extra}, f"[{section}] of {path}"
                )
            else:
                _refuse_unknown(values, extra, f"[{section}] of {path}")
        if "train" not in data:
            raise ConfigError(f'{path}: [data] needs train = "FILE"')

        def rel(value):
            return None if value in (None, "") else (base / value)

        teacher = dict(raw.get("teacher", {}))
        for key in ("model", "dir"):  # a local path is relative to the config; a hub id is kept as is
            if key in teacher and (base / teacher[key]).exists():
                teacher[key] = str(base / teacher[key])
        augment = dict(raw.get("augment", {}))
        for key in ("llm", "adapter"):  # a local path is relative to the config
            if isinstance(augment.get(key), str) and (base / augment[key]).exists():
                augment[key] = str(base / augment[key])
        pipeline = PipelineSettings.from_section(run, f"[pipeline] of {path}")
        unlabeled = data.get("unlabeled", [])
        unlabeled = [unlabeled] if isinstance(unlabeled, str) else unlabeled
        if not isinstance(unlabeled, list) or not all(isinstance(u, str) and u for u in unlabeled):
            raise ConfigError(f'{path}: [data] unlabeled must be a file or a list of files, e.g. ["notes.txt"]')
        edits = _auto_or_count(
            path,
            data,
            "teacher_edits",
            1000,
            "1000",
            "it counts new sentences per training row for the transfer set, e.g. teacher_edits = 20",
        )
        broad = _auto_or_count(
            path,
            data,
            "broad_text",
            WORDNET_SENTENCES,
            f"{WORDNET_SENTENCES:,}",
            "it counts sentences of broad English text for the transfer set, e.g. broad_text = 10000",
        )
        return cls(
            out=rel(pipeline.out),
            train=rel(data["train"]),
            dev=rel(data.get("dev")),
            test=rel(data.get("test")),
            text_column=data.get("text_column"),
            label_column=data.get("label_column"),
            unlabeled=tuple(base / u for u in unlabeled),
            unlabeled_column=data.get("unlabeled_column"),
            teacher_edits=edits,
            broad_text=broad,
            device=pipeline.device,
            seed=pipeline.seed,
            bundles=pipeline.bundles,
            teacher=teacher,
            augment=augment,
            label=dict(raw.get("label", {})),
            distill=dict(raw.get("distill", {})),
            export=dict(raw.get("export", {})),
            check={"enabled": True, **raw.get("check", {})},
        )


def _auto_or_count(path: Path, data: dict, key: str, most: int, shown: str, hint: str) -> int | str:
    """[data] `key`: "auto" (its default) or a whole number from 0 to `most` (`shown` in the message)."""
    value = data.get(key, "auto")
    if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most):
        raise ConfigError(
            f'{path}: [data] {key} must be "auto" or a whole number from 0 to {shown}, not {value!r}',
            hint,
        )
    return value


def transfer_counts(config: PipelineConfig) -> tuple[int, int]:
    """([data] teacher_edits, [data] broad_text) as counts: a number as given. "auto": teacher edits,
    TEACHER_EDITS per row, below SELF_TRAIN_BELOW labeled rows when the run has no unlabeled files (a
    student of a few hundred rows memorizes them; the text users bring does more: docs/distill.md);
    broad text, BROAD_TEXT sentences, below BROAD_TEXT_BELOW labeled rows when at least BROAD_TEXT_SHARE
    of them are English (data.english_rows): English words a few thousand rows never show. It joins the
    transfer set, or is one of its own."""
    edits, broad = config.teacher_edits, config.broad_text
    if edits != "auto" and broad != "auto":
        return int(edits), int(broad)
    with warnings.catch_warnings():  # the teacher stage says what is wrong with the file
        warnings.simplefilter("ignore", DataWarning)
        texts = read_labeled(config.train, text_column=config.text_column, label_column=config.label_column).texts
    few = len(texts) < SELF_TRAIN_BELOW
    if edits == "auto":
        edits = TEACHER_EDITS if few and not config.unlabeled else 0
    if broad == "auto":
        english = english_rows(texts)
        broad = BROAD_TEXT if len(texts) < BROAD_TEXT_BELOW and english >= BROAD_TEXT_SHARE * len(texts) else 0
    return int(edits), int(broad)


def distill_settings(
    config: PipelineConfig, edits_per_row: int, broad: int = 0, teacher_blend: float = 1.0
) -> DistillSettings:
    """[distill]'s settings for this run: with no step_budget of its own and no unlabeled files, a run
    whose transfer set is its teacher's edits (broad text may join them) gets EDITS_STEP_BUDGET, one whose
    transfer set is broad text alone BROAD_STEP_BUDGET. With no learning_rate of its own, such an edits
    run whose teacher is blended toward its probe (`teacher_blend` < 1: a few dozen labels) gets
    EDITS_LEARNING_RATE, every other run DISTILL_LEARNING_RATE."""
    ds = stage_settings(config, "distill")
    if ds.step_budget is None and not config.unlabeled and (edits_per_row or broad):
        ds = dataclasses.replace(ds, step_budget=EDITS_STEP_BUDGET if edits_per_row else BROAD_STEP_BUDGET)
    if ds.learning_rate is None:
        lower = edits_per_row and not config.unlabeled and teacher_blend < 1.0
        ds = dataclasses.replace(ds, learning_rate=EDITS_LEARNING_RATE if lower else DISTILL_LEARNING_RATE)
    return ds


def teacher_blend(teacher_dir: Path) -> float:
    """The share of its fine-tune a teacher was written with (teacher train's `blend`, as decided; the rest
    is its linear probe): 1.0 for a teacher that is its fine-tune alone, or whose manifest does not say."""
    try:
        return float((read_manifest(teacher_dir) or {})["hyperparameters"]["blend"])
    except (ManifestError, KeyError, TypeError, ValueError):
        return 1.0


def _check_unlabeled(config: PipelineConfig, edits: int, broad: int) -> tuple[str, ...]:
    """[data] unlabeled files that cannot serve (missing, empty, binary, nothing but dev/test texts or
    labeled rows) are refused before the teacher's minutes are spent; distill warns about what it drops.
    Returns the test file's texts, which every distillation drops from the transfer set (the dev texts
    it drops itself); () without a transfer set."""
    if not (config.unlabeled or edits or broad or config.augment):  # augment's rejects are transfer text too
        return ()
    columns = {"text_column": config.text_column, "label_column": config.label_column}
    dev, test = (
        () if path is None else tuple(read_labeled(path, **columns).texts) for path in (config.dev, config.test)
    )
    if not config.unlabeled:  # edits or broad text alone: nothing of the user's to check before they are written
        return test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        transfer_set(
            list(config.unlabeled),
            labeled=read_labeled(config.train, **columns).texts,
            held_out=[*dev, *test],
            text_column=config.unlabeled_column,
        )
    return test


def _refuse_unknown(values: dict, known: set, where: str) -> None:
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"unknown setting {key!r} in {where}", f"{hint}known: {', '.join(sorted(known))}")


def stage_settings(config: PipelineConfig, name: str):
    """The settings of stage `name` from its section, the pipeline's seed and device filled in."""
    if name == "pipeline":  # read into the config's own fields by from_toml
        return PipelineSettings(out=str(config.out), device=config.device, seed=config.seed, bundles=config.bundles)
    section = {k: v for k, v in getattr(config, name).items() if k not in SECTIONS[name]}
    cls = STAGE_SETTINGS[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    shared = {k: v for k, v in (("seed", config.seed), ("device", config.device)) if k in fields and k not in section}
    return cls.from_section({**section, **shared}, f"[{name}]")


@dataclass
class StageOutcome:
    name: str
    status: str  # "ran" | "skipped (up to date)" | "given"
    seconds: float
    output: str


def run_pipeline(
    config: PipelineConfig, *, progress: bool = True, log: Callable[[str], None] = lambda message: None
) -> dict:
    """Run every stage that is not up to date; return the final report."""
    began = time.perf_counter()
    LoopConfig.from_settings(stage_settings(config, "distill"))  # loss weights refused before any stage runs
    _check_augment(config)
    if not config.teacher.get("dir") and not config.teacher.get("model"):  # before the workspace is made
        raise ConfigError(NO_TEACHER)
    edits_per_row, broad = transfer_counts(config)
    held_out = _check_unlabeled(config, edits_per_row, broad)
    out = Path(config.out)
    known = Path(config.teacher["dir"]) if config.teacher.get("dir") else out / "teacher"
    ladder.check_ladder(config.bundles, stage_settings(config, "distill"), _teacher_config(known))
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE_NAME
    state = json.loads(state_path.read_text()) if state_path.is_file() else {}
    outcomes: list[StageOutcome] = []

    def stage(name: str, output: Path, fingerprint: str, work: Callable[[], None]) -> None:
        if state.get(name) == fingerprint and output.exists():
            outcomes.append(StageOutcome(name, "skipped (up to date)", 0.0, str(output)))
            log(f"[{name}] up to date: {output}")
            return
        log(f"[{name}] running → {output}")
        start = time.perf_counter()
        state.pop(name, None)  # a stage that re-runs invalidates itself until it finishes
        atomic_write_json(state_path, state)
        work()
        state[name] = fingerprint
        atomic_write_json(state_path, state)
        outcomes.append(StageOutcome(name, "ran", time.perf_counter() - start, str(output)))
        log(f"[{name}] done in {time.perf_counter() - start:.0f} s")

    data_fp = fingerprint(config.train, config.dev, config.text_column, config.label_column)
    if config.unlabeled:  # by content, as the training file: a changed transfer set relabels and redistills
        data_fp = fingerprint(data_fp, *config.unlabeled, config.unlabeled_column, config.test)

    # 1. teacher
    t = config.teacher
    if t.get("dir"):
        teacher_dir = Path(t["dir"])
        teacher_fp = fingerprint(teacher_dir / "model.safetensors")
        outcomes.append(StageOutcome("teacher", "given", 0.0, str(teacher_dir)))
    else:
        teacher_dir = out / "teacher"
        # the settings as read, not as written: a config that spells out a default re-runs nothing
        teacher_fp = fingerprint("teacher", t["model"], stage_settings(config, "teacher"), data_fp, config.seed)

        def train():
            train_teacher(
                model=t["model"],
                train=config.train,
                dev=config.dev,
                out=teacher_dir,
                force=True,
                text_column=config.text_column,
                label_column=config.label_column,
                unlabeled=config.unlabeled,
                unlabeled_column=config.unlabeled_column,
                held_out_texts=held_out,
                progress=progress,
                **stage_settings(config, "teacher").kwargs(),
            )

        stage("teacher", teacher_dir, teacher_fp, train)

    # 1b. augment (when configured): synthetic rows cleaned by the teacher; label and distill then read
    # the training file and them together, from one file the stage writes. What the teacher rejected
    # (and the surplus) joins the transfer set: the LLM's text, labeled softly by the teacher. With no
    # dev file (distill cuts its dev split from the training file) every line is transfer text only,
    # written from the rows distill trains on: no synthetic row can land in that split
    train, text_column, label_column = config.train, config.text_column, config.label_column
    unlabeled = tuple(config.unlabeled)
    ds = distill_settings(config, edits_per_row, broad, teacher_blend(teacher_dir))
    if config.augment:
        augment_dir = out / "augment"
        llm_text = augment_dir / AUGMENT_TRANSFER  # absent in a workspace from before it was written
        adapter = config.augment.get("adapter")  # its weights by content: a retrained adapter reruns the stage
        weights = [Path(adapter) / "adapters.safetensors"] if adapter else []
        data_fp = fingerprint(data_fp, "augment", config.augment, teacher_fp, config.seed, *weights)
        if config.dev is None:  # the seeds are distill's training rows: its split's settings are inputs
            data_fp = fingerprint(data_fp, "lines only", ds.dev_fraction, ds.seed)
            output, lines_only = llm_text, ds
        else:
            train, text_column, label_column = augment_dir / "train+synthetic.jsonl", None, None
            output, lines_only = train, None
        stage(
            "augment",
            output,
            data_fp,
            lambda: log(format_details(_augment(config, teacher_dir, augment_dir, progress, lines_only))),
        )
        if llm_text.is_file() and llm_text.stat().st_size:
            unlabeled += (llm_text,)

    # 1c. teacher edits (when configured): new sentences from the training rows, a transfer set that
    # label and distill read as an unlabeled file (the rows distill trains on: [distill]'s split)
    bag_files: tuple[Path, ...] = ()  # the edits stage's word bags, when it wrote any
    if edits_per_row:
        edits = out / "edits.jsonl"  # under [data] unlabeled_column's name, as the unlabeled files are read
        # word bags: 10,000 at TEACHER_EDITS per row or more, in proportion below (augment/bags.py)
        bags = WORD_BAGS * min(edits_per_row, TEACHER_EDITS) // TEACHER_EDITS
        bags_file = out / "bags.jsonl"  # its own file: the int8/int4 fine-tunes skip it, as they skip broad text
        data_fp = fingerprint(data_fp, "edits", edits_per_row, teacher_fp, config.seed, EDITS_VERSION, bags)

        def write_edits():
            made, made_bags, rows = write_teacher_edits(
                teacher=teacher_dir,
                train=train,
                dev=config.dev,
                out=edits,
                per_text=edits_per_row,
                dev_fraction=ds.dev_fraction,
                seed=ds.seed,
                text_column=text_column,
                label_column=label_column,
                column=config.unlabeled_column or "text",
                force=True,
                bags=bags,
                bags_out=bags_file,
            )
            log(f"[edits] {made} sentences and {made_bags} word bags from {rows} training rows")

        stage("edits", edits, data_fp, write_edits)
        if bags_file.is_file() and bags_file.stat().st_size > 0:  # none for rows of other scripts
            bag_files = (bags_file,)
        unlabeled += (edits, *bag_files)

    # 1d. broad text (transfer_counts): English sentences of every kind (WordNet's examples), so that the
    # student meets the words and pieces a few labeled rows never show; the transfer set reads them too
    if broad:
        broad_file = out / "broad.jsonl"  # under [data] unlabeled_column's name, as the unlabeled files are read
        data_fp = fingerprint(data_fp, "broad", broad)

        def write_broad():
            column = config.unlabeled_column or "text"
            rows = [json.dumps({column: t}, ensure_ascii=False) + "\n" for t in broad_english(broad)]
            atomic_write_text(broad_file, "".join(rows))
            log(f"[broad] {broad} sentences of broad English text")

        stage("broad", broad_file, data_fp, write_broad)
        unlabeled += (broad_file,)

    # 2. label: the teacher layers the distill losses need (of [distill]'s student and the int4 student's)
    ladder.check_ladder(config.bundles, ds, _teacher_config(teacher_dir))
    hidden_layers, attention_layers = _layers_needed(teacher_dir, ds, int4="int4" in config.bundles)
    targets_dir = out / "targets"
    label_fp = fingerprint(
        "label", stage_settings(config, "label"), teacher_fp, data_fp, hidden_layers, attention_layers
    )

    def label():
        def attempt(force: bool):
            label_targets(
                teacher=teacher_dir,
                data=[train],
                out=targets_dir,
                **stage_settings(config, "label").kwargs(),
                hidden_layers=hidden_layers,
                attention_layers=attention_layers,
                text_column=text_column,
                label_column=label_column,
                unlabeled=list(unlabeled) or None,
                unlabeled_column=config.unlabeled_column,
                progress=progress,
                force=force,
            )

        try:
            attempt(force=False)  # resumes a cache of this very setup
        except SetupMismatch:  # a cache of an older setup: its stage is stale, start over
            attempt(force=True)

    stage("label", targets_dir, label_fp, label)

    # 3. distill: [distill]'s student (the fp16 bundle's; int8 splits it, and int4 when it is `auto`)
    student_dir = out / "student"
    distill_fp = fingerprint("distill", ds, label_fp)
    inputs = ladder.Inputs(
        teacher=teacher_dir,
        targets=targets_dir,
        train=train,
        dev=config.dev,
        workspace=out,
        distill=ds,
        export=stage_settings(config, "export"),
        text_column=text_column,
        label_column=label_column,
        unlabeled=unlabeled,
        broad=((broad_file,) if broad else ()) + bag_files,
        unlabeled_column=config.unlabeled_column,
        held_out=held_out,
        progress=progress,
    )
    if ladder.needs_student(config.bundles, ds):
        stage("distill", student_dir, distill_fp, lambda: ladder.distill_student(inputs, student_dir))

    # 4. the bundle ladder: each kind's steps (distillations, then its export) as stages of their own
    rungs = ladder.rungs(config.bundles, ds, student_width=_width(student_dir))
    for rung in rungs:
        upstream = distill_fp  # [distill]'s settings and the targets: every kind's students read both
        for step in rung.steps:
            upstream = fingerprint(step.name, step.recipe, inputs.export if step.export else None, upstream)
            output = out / step.output
            stage(step.name, output, upstream, lambda step=step, output=output: step.run(inputs, output))

    # 5. check every bundle (always re-run: it is the verdict of the report)
    checks = {}
    if config.check.get("enabled", True):
        start = time.perf_counter()
        for rung in rungs:
            log(f"[check] verifying {out / rung.bundle}")
            checks[rung.kind] = check_bundle(out / rung.bundle, student_dir=out / rung.student)
        outcomes.append(StageOutcome("check", "ran", time.perf_counter() - start, str(out)))

    start = time.perf_counter()
    report = final_report(config, teacher_dir, rungs, checks, outcomes)
    if config.augment:
        report["augment"] = _augment_summary(out / "augment" / "synthetic.jsonl", rows=config.dev is not None)
    report["stages"].append(asdict(StageOutcome("report", "ran", time.perf_counter() - start, str(out))))
    report["seconds"] = time.perf_counter() - began  # the whole run, start-up and fingerprints included
    atomic_write_json(out / "report.json", report)
    return report


def _teacher_config(teacher_dir: Path):
    """The teacher's shape when it is known before training (a given or finished teacher), else None."""
    return load_config(teacher_dir) if (teacher_dir / "config.json").is_file() else None


def _width(student_dir: Path) -> int | None:
    return load_config(student_dir).hidden_size if (student_dir / "config.json").is_file() else None


def _check_augment(config: PipelineConfig) -> None:
    """An [augment] section needs per_class; llm and adapter, when given, are names in quotes."""
    if not config.augment:
        return
    per_class = config.augment.get("per_class")
    if isinstance(per_class, bool) or not isinstance(per_class, int) or per_class < 1:
        raise ConfigError(f"[augment] needs per_class = N (new examples per class, N >= 1), got {per_class!r}")
    if not isinstance(config.augment.get("llm", ""), str):
        raise ConfigError('[augment] llm must be a name, directory or hub id in quotes, e.g. "smollm2-135m-instruct"')
    if "adapter" in config.augment and not (isinstance(config.augment["adapter"], str) and "llm" in config.augment):
        raise ConfigError('[augment] adapter needs llm too, and a directory in quotes: adapter = "adapter"')


def _augment(
    config: PipelineConfig, teacher_dir: Path, directory: Path, progress: bool, lines_only: DistillSettings | None
) -> AugmentResult:
    """Run (or resume) augment into `directory`. With a dev file: the training rows and the synthetic
    ones as one file, what augment did not keep as transfer text. `lines_only` (no dev file; distill's
    settings): the LLM writes from the rows distill trains on, and every line is transfer text."""
    section = config.augment
    columns = {"text_column": config.text_column, "label_column": config.label_column}
    seeds, seed_columns = config.train, columns
    if lines_only is not None:  # distill's own split of the training file, as the edits stage takes it
        labels = load_config(teacher_dir).labels
        split = student_rows(
            teacher_dir, config.train, None, labels, lines_only.dev_fraction, lines_only.seed, **columns
        )
        seeds, seed_columns = directory / "seeds.jsonl", {}  # {"text", "label"} rows: augment's default columns
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(seeds, _labeled_jsonl(split.train))
    kwargs = dict(
        seeds=seeds,
        out=directory / "synthetic.jsonl",
        per_class=section["per_class"],
        llm=section.get("llm"),
        adapter=section.get("adapter"),
        teacher=teacher_dir,
        progress=progress,
        **seed_columns,
        **stage_settings(config, "augment").kwargs(),
    )
    try:
        result = run_augment(**kwargs)  # resumes an interrupted run of this very setup
    except AugmentMismatch:  # the work of older settings: this stage owns the directory, start over
        result = run_augment(**kwargs, force=True)
    real = read_labeled(config.train, **columns)
    sources, labeled = [Path(result.transfer)], list(real.texts)
    if lines_only is not None:
        sources.insert(0, Path(result.out))  # the rows it kept, their labels dropped: the teacher's soft ones serve
    else:
        synthetic = Path(result.out).read_text(encoding="utf-8")
        atomic_write_text(directory / "train+synthetic.jsonl", _labeled_jsonl(real) + synthetic)
        labeled += [json.loads(r)["text"] for r in synthetic.splitlines()]
    # the transfer text: once each, none a training, synthetic, dev or test text (a file of nothing but
    # those would be refused by label), under [data] unlabeled_column's name
    held_out = [t for path in (config.dev, config.test) if path for t in read_labeled(path, **columns).texts]
    try:
        with warnings.catch_warnings():  # dev/test repeats are dropped here, as label and distill would
            warnings.simplefilter("ignore", DataWarning)
            texts = transfer_set(sources, labeled=labeled, held_out=held_out).texts
    except DataError:  # no text, or none left
        texts = []
    column = config.unlabeled_column or "text"
    atomic_write_text(
        directory / AUGMENT_TRANSFER, "".join(json.dumps({column: t}, ensure_ascii=False) + "\n" for t in texts)
    )
    return result


def _labeled_jsonl(data: LabeledData) -> str:
    """`data`'s rows as {"text", "label"} JSON lines (the form augment writes its own rows in)."""
    return "".join(
        json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n" for t, y in zip(data.texts, data.labels)
    )


def _augment_summary(synthetic: Path, *, rows: bool) -> dict:
    """Synthetic rows kept per class, from the augment manifest (a skipped stage's too); `rows`: they
    joined the training rows (a run with a dev file), else they are transfer text."""
    manifest = json.loads(synthetic.with_name(synthetic.name + ".manifest.json").read_text(encoding="utf-8"))
    kept = {label: counts["kept"] for label, counts in manifest["report"].items()}
    transfer = synthetic.with_name(AUGMENT_TRANSFER)
    texts = len(transfer.read_text(encoding="utf-8").splitlines()) if transfer.is_file() else 0
    return {
        "file": str(synthetic),
        "llm": manifest["setup"]["llm"],
        "kept": kept,
        "complete": manifest["complete"],
        "rows": rows,
        "transfer": {"file": str(transfer), "texts": texts},
    }


def _layers_needed(teacher_dir: Path, d: DistillSettings, *, int4: bool) -> tuple[list[int], list[int]]:
    """Hidden/attention layers of the teacher the students' losses read (cache keys): [distill]'s
    student's, and the int4 student's (4 layers, a uniform map) when the ladder makes one."""
    weights = {k: getattr(d, f"{k}_weight") for k in ("hidden", "attention", "embedding")}
    on = {k for k, w in weights.items() if any(float(x) > 0 for x in w.split(":"))}
    if not on or not (teacher_dir / "config.json").is_file():
        return [], []
    teacher = load_config(teacher_dir)
    maps = []
    if d.student != "static":
        student, _ = student_config(d.student, teacher)
        maps.append(parse_layer_map(d.layer_map, student.num_hidden_layers, teacher.num_hidden_layers))
    if int4:
        layers = ladder.int4_shape(teacher)["num_hidden_layers"]
        maps.append(parse_layer_map(None, layers, teacher.num_hidden_layers))
    mapped = {j + 1 for mapping in maps for j in mapping.values()}
    hidden = (mapped if "hidden" in on else set()) | ({0} if "embedding" in on else set())
    return sorted(hidden), sorted(mapped) if "attention" in on else []


def final_report(
    config: PipelineConfig,
    teacher_dir: Path,
    rungs: list[ladder.Rung],
    checks: dict,
    outcomes: list[StageOutcome],
) -> dict:
    """Teacher and students' accuracy on dev/test, each bundle's row of the table, the bundle to ship, verdict.

    "student", "retained", "parameters", "speedup" and "bundle" describe the ladder's first bundle (the
    fp16 one by default); "bundles" has every bundle's row and "recommended" names the one to ship."""
    out = Path(config.out)
    first = rungs[0]
    student_dir, bundle_dir = out / first.student, out / first.bundle
    student_manifest = read_manifest(student_dir) or {}
    if "report" not in student_manifest:
        raise ManifestError(
            f"{student_dir} has no distill report in its manifest", "delete that folder and run again to redistill"
        )
    distill_report = student_manifest["report"]
    max_length = student_manifest["max_length"]
    splits = {"dev": config.dev, "test": config.test}
    scores: dict[str, dict[str, float]] = {}
    by_language: dict[str, dict[str, dict[str, float]]] = {}
    per_bundle: dict[str, dict[str, float]] = {r.kind: {} for r in rungs}
    dev_rows = None
    columns = {"text_column": config.text_column, "label_column": config.label_column}
    most_common = Counter(read_labeled(config.train, **columns).labels).most_common(1)[0][0]
    notes = list(distill_report.get("notes", []))  # the teacher's soft labels, from the distillation
    for split, path in splits.items():
        if path is None:
            continue
        data = read_labeled(path, **columns)
        languages = np.array([language_of(t) for t in data.texts])
        scores[split], by_language[split] = {}, {}
        who_dirs = [("teacher", teacher_dir), ("student", student_dir)]
        who_dirs += [(r.kind, out / r.student) for r in rungs[1:]]
        for who, directory in who_dirs:
            probs = predict_texts(directory, data.texts, max_length=max_length, device=config.device).probabilities
            labels = LabelMap(list(probs[0]))
            predicted = labels.encode([max(p, key=p.get) for p in probs])
            right = predicted == labels.encode(data.labels)
            if who != "teacher":
                per_bundle[first.kind if who == "student" else who][split] = float(right.mean())
            if who not in ("teacher", "student"):
                continue
            scores[split][who] = float(right.mean())
            if split == "dev" and who == "teacher":
                dev_rows = (data.texts, labels.encode(data.labels), predicted)
            for language in sorted(set(languages)):
                entry = by_language[split].setdefault(language, {"examples": int((languages == language).sum())})
                entry[who] = float(right[languages == language].mean())
            majority = float(np.mean([label == most_common for label in data.labels]))
            note = trivial_note(who, scores[split][who], majority=majority, num_labels=len(labels), split=split)
            if note and note not in notes:
                notes.append(note)
    bundles = []
    for r in rungs:
        row = {"bundle": r.kind, "path": str(out / r.bundle), "student": str(out / r.student)}
        if dev_rows is not None:
            row.update(bundle_row(out / r.student, out / r.bundle, *dev_rows).to_dict())
        row["accuracy"] = per_bundle[r.kind]
        row["check"] = None if r.kind not in checks else checks[r.kind].ok
        bundles.append(row)
    failed = [f"{kind}: {c.name}" for kind, report in checks.items() for c in report.failed]
    files = {p.name: disk_bytes(p) for p in sorted(bundle_dir.iterdir())} if bundle_dir.is_dir() else {}
    return {
        "stages": [asdict(o) for o in outcomes],
        "accuracy": scores,
        "accuracy_by_language": by_language,
        "retained": {split: s["student"] / s["teacher"] if s["teacher"] else 0.0 for split, s in scores.items()},
        "parameters": {
            "teacher": distill_report["teacher_parameters"],
            "student": distill_report["student_parameters"],
        },
        "size_ratio": distill_report["teacher_parameters"] / distill_report["student_parameters"],
        "speedup": distill_report["speedup"],
        "bundle": {"path": str(bundle_dir), "files": files},
        "bundles": bundles,
        "recommended": recommend(bundles),
        # kind x precision -> size, accuracy, agreement, latency (issue 16's table; one row per bundle)
        "bundle_table": [
            {k: row[k] for k in BundleRow.__dataclass_fields__} for row in bundles if "dev_accuracy" in row
        ],
        "check": None if not checks else {"ok": not failed, "failed": failed},
        "distill": distill_summary(student_manifest),
        "notes": notes,  # one line each: a model no better than chance or the majority label, flat soft labels
    }


def distill_summary(manifest: dict) -> dict:
    """How the first bundle's student trained, from its manifest: the epochs run against those asked
    (min_steps may add some, step_budget take some: a few-label run's transfer set always meets its
    budget), the steps, the transfer texts beside the labeled rows, and the epoch kept."""
    loop, report = manifest.get("loop", {}), manifest.get("report", {})
    return {
        "epochs": loop.get("epochs"),
        "min_steps": loop.get("min_steps"),
        "step_budget": loop.get("step_budget"),
        "epochs_run": report.get("epochs_run"),
        "steps": report.get("steps"),
        "stopped_early": bool(report.get("stopped_early", False)),
        "transfer_rows": report.get("transfer_rows", 0),
        "best_epoch": report.get("best_epoch"),
        "kept": report.get("kept", "best"),
    }


def format_distill(summary: dict) -> str | None:
    """One line: `distill: 3 of 10 epochs (step budget 1,500), 1,464 steps, ...`; None when the report
    predates the summary."""
    run, asked, budget = summary.get("epochs_run"), summary.get("epochs"), summary.get("step_budget")
    if run is None or asked is None or summary.get("steps") is None:
        return None
    if summary["stopped_early"]:
        epochs = f"{run} of {asked} epochs (stopped early: no dev gain)"
    elif run < asked and budget:
        epochs = f"{run} of {asked} epochs (step budget {budget:,})"
    elif run > asked and summary.get("min_steps"):
        epochs = f"{run} epochs ({asked} asked, too few steps for min_steps {summary['min_steps']:,})"
    else:
        epochs = f"{run} epochs"
    texts = summary["transfer_rows"]
    data = f"the labeled rows and {texts:,} transfer texts" if texts else "the labeled rows alone (no transfer set)"
    kept = "the best on dev" if summary["kept"] == "best" else "the last"
    return f"distill: {epochs}, {summary['steps']:,} steps, over {data}; kept epoch {summary['best_epoch']} ({kept})"


RECOMMEND_WITHIN = 0.01  # 1 point


def recommend(bundles: list[dict]) -> str | None:
    """The bundle to ship: the smallest that passed its check and is within 1 point of the best on both dev
    accuracy and agreement with the teacher (agreement is the steadier of the two on a few hundred texts:
    a bundle that scores as well on dev but disagrees more with the teacher is lucky, not as faithful).
    When none is near the best on both (the most accurate disagrees most), the most accurate."""
    scored = [b for b in bundles if "dev_accuracy" in b and b.get("check") is not False]
    if not scored:
        return None
    best = {key: max(b[key] for b in scored) for key in ("dev_accuracy", "agreement")}
    near = [b for b in scored if all(b[key] >= best[key] - RECOMMEND_WITHIN - 1e-9 for key in best)]
    if not near:
        return max(scored, key=lambda b: (b["dev_accuracy"], b["agreement"], -b["bundle_bytes"]))["bundle"]
    return min(near, key=lambda b: b["bundle_bytes"])["bundle"]


def format_report(report: dict) -> str:
    lines = ["stage           status                 seconds    min  output"]
    for s in report["stages"]:
        lines.append(f"{s['name']:<15} {s['status']:<22} {s['seconds']:>7.0f} {s['seconds'] / 60:>6.1f}  {s['output']}")
    total = report.get("seconds", sum(s["seconds"] for s in report["stages"]))
    lines.append(f"{'total':<15} {'':<22} {total:>7.0f} {total / 60:>6.1f}")
    for split, s in report["accuracy"].items():
        lines.append(
            f"{split:<5} accuracy: teacher {s['teacher']:.1%}, student {s['student']:.1%}"
            f" (retained {report['retained'][split]:.1%})"
        )
        for language, a in report.get("accuracy_by_language", {}).get(split, {}).items():
            lines.append(f"      {language} ({a['examples']}): teacher {a['teacher']:.1%}, student {a['student']:.1%}")
    distill_line = format_distill(report.get("distill", {}))  # (a report of an older version has none)
    if distill_line:
        lines.append(distill_line)
    if "augment" in report:
        a = report["augment"]
        kept = ", ".join(f"{label} {n}" for label, n in a["kept"].items())
        texts = a.get("transfer", {}).get("texts", 0)  # (a report of an older version has no count)
        name = a["llm"] or "token edits"
        if a.get("rows", True):  # (a report of an older version has no "rows": they were rows)
            rest = f"; {texts} texts it did not keep joined the transfer set" if texts else ""
            lines.append(f"augment ({name}): {sum(a['kept'].values())} synthetic rows ({kept}){rest}")
        else:
            lines.append(f"augment ({name}): {texts} texts joined the transfer set, as no dev file was given ({kept})")
    p = report["parameters"]
    lines.append(
        f"size: teacher {p['teacher'] / 1e6:.1f}M parameters, student {p['student'] / 1e6:.1f}M"
        f" ({report['size_ratio']:.1f}x smaller); student {report['speedup']:.1f}x faster on the same backend"
    )
    lines.extend(format_bundles(report))
    if report["check"] is not None:
        verdict = "PASSED" if report["check"]["ok"] else f"FAILED ({', '.join(report['check']['failed'])})"
        lines.append(f"check: {verdict}")
    lines.extend(f"note: {note}" for note in report.get("notes", []))
    return "\n".join(lines)


def format_bundles(report: dict) -> list[str]:
    """The bundle table: kind, precision, MB, dev/test accuracy, % of the teacher, agreement, latency, check."""
    bundles = [b for b in report.get("bundles", []) if "dev_accuracy" in b]
    if not bundles:
        files = ", ".join(f"{name} ({size / 1e6:.1f} MB)" for name, size in report["bundle"]["files"].items())
        return [f"bundle {report['bundle']['path']}: {files}"]
    header = ["bundle", "student", "precision", "MB", "dev", "test", "% teacher", "agreement", "ms", "check", "path"]
    cells = []
    for b in bundles:
        test = b["accuracy"].get("test")
        cells.append([
            b["bundle"] + (" *" if b["bundle"] == report.get("recommended") else ""),
            b["kind"],
            b["precision"],
            f"{b['bundle_bytes'] / 1e6:.2f}",
            f"{b['dev_accuracy']:.1%}",
            "-" if test is None else f"{test:.1%}",
            f"{b['retained']:.1%}",
            f"{b['agreement']:.1%}",
            f"{b['mirror_ms']:.2f}",
            {True: "PASSED", False: "FAILED", None: "-"}[b["check"]],
            b["path"],
        ])  # fmt: skip
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in [header, *cells]]
    lines.append(
        "% teacher: dev accuracy over the teacher's; ms: per sentence, batch 1, the exported program's PyTorch "
        "mirror on this CPU (CoreML's own: on a Mac)"
    )
    if report.get("recommended"):
        lines.append(
            f"recommended: {report['recommended']} (*), the smallest bundle within 1 point of the best dev accuracy "
            "and agreement"
        )
    return lines
