"""What the app takes on trust from manifest.json, checked against the models themselves.

MLXEdgeKit names its probabilities from `labels` and tokenizes with the vocabulary file the
manifest names. A manifest can be edited and its `files` sha256 recomputed, so neither is taken on
the manifest's word: the labels are compared with the `mlx_edge.labels` metadata export writes into
each CoreML model, with the head's output count and with the student's config (when check has it);
the vocabulary with the encoder's own embedding table (size, special ids) and with the sha256 of
each tokenizer file that export records in the encoder's and classifier's metadata. A swapped
vocabulary of the same size passes every size check: only the recorded sha256 tells, and faking it
takes editing the models, not just the manifest.
"""

from __future__ import annotations

import json
from pathlib import Path

from bridges.checks import CheckResult
from bridges.coreml_export import load_spec
from bridges.coreml_head import head_weights, load_head_spec
from bridges.io_names import INPUT_IDS
from mlx_edge.bundle.layout import LABELS_KEY, TOKENIZER_KEY, tokenizer_digests

MODELS = ("encoder", "classifier", "head")  # the CoreML models that record labels (the classifier is an extra)
TOKEN_MODELS = ("encoder", "classifier")  # the models fed token ids
ROLES = ("cls", "sep", "pad", "unk")


def read_specs(bundle: Path, manifest: dict) -> dict:
    """The CoreML specs (no weights) of the bundle's models; one that cannot be read, or an extra the
    bundle does not have, is left out (the io.* and load.* checks report a damaged one)."""
    specs = {}
    for key in (k for k in MODELS if k in manifest["models"]):
        path = Path(bundle) / manifest["models"][key]["file"]
        try:
            specs[key] = load_head_spec(path) if key == "head" else load_spec(path)
        except Exception:  # a damaged model: protobuf/coremltools raise many kinds
            continue
    return specs


# --- labels ----------------------------------------------------------------------------------


def check_labels(manifest: dict, specs: dict, student_labels: list[str] | None = None) -> CheckResult:
    """The manifest's labels, in order, are those the models and the student were made with."""
    labels, models = manifest["labels"], manifest["models"]
    sources = [
        (
            models[key]["file"],
            f"{models[key]['file']}'s {LABELS_KEY} metadata",
            _json(_metadata(specs[key])[LABELS_KEY]),
        )
        for key in MODELS
        if key in specs and LABELS_KEY in _metadata(specs[key])
    ]
    if student_labels is not None:
        sources.append(("the student's config", "the student's config.json id2label", list(student_labels)))
    problem = _head_count(labels, specs, models) or next(
        (p for _, where, recorded in sources if (p := _label_difference(labels, recorded, where))), None
    )
    if problem:
        return CheckResult("labels", False, f"{problem} (the app names its probabilities from manifest.json's list)")
    if not sources:
        return CheckResult(
            "labels", True, "no model records its labels and the student is not here: order not verified", skipped=True
        )
    return CheckResult("labels", True, f"{len(labels)} labels, in the order {', '.join(s[0] for s in sources)} record")


def _head_count(labels: list[str], specs: dict, models: dict) -> str | None:
    if "head" not in specs:
        return None
    try:
        rows = head_weights(specs["head"])[0].shape[0]
    except ValueError:  # no innerProduct: head.updatable reports it
        return None
    if rows == len(labels):
        return None
    return f"manifest.json has {len(labels)} labels, {models['head']['file']} computes {rows} probabilities"


def _label_difference(expected: list[str], recorded, where: str) -> str | None:
    if not isinstance(recorded, list):
        return f"{where} is not a list of labels"
    for i, (ours, theirs) in enumerate(zip(expected, recorded)):
        if ours != theirs:
            return f"labels[{i}] is {_quote(ours)} in manifest.json but {_quote(theirs)} in {where}"
    if len(expected) != len(recorded):
        return f"manifest.json has {len(expected)} labels, {where} has {len(recorded)}"
    return None


# --- vocabulary ------------------------------------------------------------------------------


def check_vocabulary(bundle: Path, manifest: dict, specs: dict) -> CheckResult:
    """The vocabulary MLXEdgeKit reads is the one the encoder was exported with: its size is the
    encoder's embedding rows, the special ids are where the manifest says, and every tokenizer file
    has the sha256 export recorded inside the models."""
    entry, models = manifest["tokenizer"], manifest["models"]
    if "encoder" not in specs:
        return _vocab(True, f"not run: {models['encoder']['file']} cannot be read", skipped=True)
    unigram = entry.get("type", "wordpiece") == "unigram"
    name = entry.get("spec_file") if unigram else entry.get("vocab_file")
    try:
        tokens = app_vocabulary(Path(bundle) / name, unigram=unigram) if name else None
    except (OSError, ValueError) as exc:  # ValueError covers JSON and UTF-8 errors
        return _vocab(False, f"{name} cannot be read: {exc}")
    if tokens is None:
        return _vocab(
            False, "manifest.json names no tokenizer file the app can read (tokenizer.vocab_file or spec_file)"
        )
    problems = _size_problems(name, tokens, manifest, specs) + _special_problems(name, tokens, entry)
    recorded, unrecorded = _recorded_problems(Path(bundle), entry, specs, models)
    problems += recorded
    if problems:
        return _vocab(False, "; ".join(problems[:3]))
    detail = f"{name}: {len(tokens)} tokens, the encoder's embedding rows, with the special ids in place"
    if unrecorded:
        # Bundles exported before export recorded the sha256: readable, but a same-size swap goes unseen.
        return _vocab(
            True,
            f"{detail}; its content cannot be tied to the model: {' and '.join(unrecorded)} record no "
            f"{TOKENIZER_KEY} (exported by an older mlx-edge: export again to have it checked)",
            skipped=True,
        )
    return _vocab(True, f"{detail}; every tokenizer file is the one the models were exported with")


def app_vocabulary(path: Path, *, unigram: bool) -> list[str]:
    """Tokens in id order as MLXEdgeKit reads them: a Unigram spec's pieces, or vocab.txt's lines
    (as transformers' `load_vocab`: UTF-8, universal newlines, id = line)."""
    if unigram:
        pieces = json.loads(path.read_text(encoding="utf-8")).get("pieces")
        if not isinstance(pieces, list):
            raise ValueError("it has no pieces list")
        return pieces
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def embedding_rows(spec) -> int | None:
    """Rows of the table the mlprogram gathers `input_ids` from (read from the program's types,
    without its weights): the vocabulary size the model was built for."""
    function = spec.mlProgram.functions["main"]
    ops = function.block_specializations[function.opset].operations
    shapes = {
        out.name: [int(d.constant.size) for d in out.type.tensorType.dimensions] for op in ops for out in op.outputs
    }
    producers = {out.name: op for op in ops for out in op.outputs}
    for op in ops:
        if op.type == "gather" and any(_carries_ids(name, producers) for name in _arguments(op, "indices")):
            table = shapes.get(next(iter(_arguments(op, "x")), None))
            return table[0] if table else None
    return None


# Ops through which the token ids reach the embedding lookup unchanged in meaning: iOS 17+ programs
# cast them to int16 and wrap negative indices (select(i >= 0, i, i + rows)) before the gather.
_ID_PATHS = {"cast": ("x",), "identity": ("x",), "select": ("a", "b"), "add": ("x", "y")}


def _carries_ids(name: str, producers: dict, depth: int = 0) -> bool:
    if name == INPUT_IDS:
        return True
    op = producers.get(name)
    if op is None or op.type not in _ID_PATHS or depth > 16:
        return False
    return any(_carries_ids(arg, producers, depth + 1) for key in _ID_PATHS[op.type] for arg in _arguments(op, key))


def _size_problems(name: str, tokens: list[str], manifest: dict, specs: dict) -> list[str]:
    """The sizes the manifest and the vocabulary file give vs the first token model's embedding rows
    that disagrees (the encoder's, then the classifier's)."""
    sizes = (
        (f"{name}'s token count", len(tokens)),
        ("tokenizer.vocab_size", manifest["tokenizer"]["vocab_size"]),
        ("student.vocab_size", manifest["student"]["vocab_size"]),
    )
    for key in (k for k in TOKEN_MODELS if k in specs):
        file, rows = manifest["models"][key]["file"], embedding_rows(specs[key])
        if rows is None:
            return [f"{file} has no embedding lookup of {INPUT_IDS}"]
        problems = [f"{what} is {size}, {file} embeds {rows} tokens" for what, size in sizes if size != rows]
        if problems:
            return problems
    return []


def _special_problems(name: str, tokens: list[str], entry: dict) -> list[str]:
    ids = {token: i for i, token in enumerate(tokens)}  # a repeated token keeps its last id, as in Swift
    problems = []
    for role in ROLES:
        token, expected = entry[f"{role}_token"], entry[f"{role}_id"]
        if not 0 <= expected < len(tokens):
            problems.append(f"tokenizer.{role}_id {expected} is outside {name}'s {len(tokens)} tokens")
        elif ids.get(token) != expected:
            problems.append(f"tokenizer.{role}_id is {expected}, {name} has {_quote(token)} at {ids.get(token)}")
    return problems


def _recorded_problems(bundle: Path, entry: dict, specs: dict, models: dict) -> tuple[list[str], list[str]]:
    """Tokenizer files vs the sha256 recorded in the first token model that records them, and the
    token models that record none."""
    unrecorded = []
    for key in TOKEN_MODELS:
        if key not in specs:
            continue
        file, raw = models[key]["file"], _metadata(specs[key]).get(TOKENIZER_KEY)
        if raw is None:
            unrecorded.append(file)
            continue
        recorded = _json(raw)
        if not isinstance(recorded, dict):
            return [f"{file}'s {TOKENIZER_KEY} metadata is not a JSON object"], unrecorded
        return _compare_recorded(bundle, entry["files"], recorded, file), unrecorded
    return [], unrecorded


def _compare_recorded(bundle: Path, listed: list[str], recorded: dict, file: str) -> list[str]:
    problems = [f"tokenizer.files lists {n}, which {file} was not exported with" for n in listed if n not in recorded]
    problems += [f"{n}, which {file} was exported with, is not in tokenizer.files" for n in recorded if n not in listed]
    # only names the manifest lists are opened: they passed refuse_escapes, the metadata's did not
    present = [n for n in listed if n in recorded and (bundle / n).is_file()]
    problems += [f"{n} is missing ({file} was exported with it)" for n in listed if n in recorded and n not in present]
    actual = tokenizer_digests(bundle, present)
    problems += [
        f"{n} is not the file {file} was exported with (its sha256 differs from the {TOKENIZER_KEY} metadata)"
        for n in present
        if actual[n] != recorded[n]
    ]
    return problems


# --- small helpers ---------------------------------------------------------------------------


def _metadata(spec) -> dict:
    return dict(spec.description.metadata.userDefined)


def _json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _arguments(op, name: str) -> list[str]:
    return [a.name for a in op.inputs[name].arguments] if name in op.inputs else []


def _quote(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _vocab(ok: bool, detail: str, *, skipped: bool = False) -> CheckResult:
    return CheckResult("tokenizer.vocabulary", ok, detail, skipped=skipped)
