"""Few labels, with and without a transfer set: `mlx-edge run` on a seeded, stratified sample of a labeled set.

    .venv/bin/python benchmarks/transfer_set.py [--dataset todo] [--sizes 100,300] [--arms none,unlabeled,edits]
        [--seeds 0] [--teacher multilingual-e5-small] [--work DIR] [--json FILE]

`--dataset`: the shipped to-do set (`todo`, its test split scored) or one of the public sets of
benchmarks/public_sets.py (`thucnews-titles`: Chinese news topics; `vader-sentiment`: English
sentiment; their own test splits scored).

For each size and seed: `size` labeled training rows drawn per label in proportion (seeded), the
shipped dev set left out (a user with 300 labels has no 600-row dev set: the pipeline cuts its own
from the labeled rows, as it does for users), the shipped test set scored. Arms:

- `none`: the labeled rows alone, no transfer set (teacher_edits = 0 and, unless `--broad-text` is
  given, broad_text = 0; otherwise the pipeline's defaults, fp16 bundle only);
- `unlabeled`: the same, plus the rest of the training file's texts, labels removed, as `[data]
  unlabeled` (the transfer set; test texts are dropped by the pipeline);
- `edits`: the labeled rows plus `[data] teacher_edits` (default 20) new sentences per row, words
  swapped for the teacher's embedding neighbours (augment/neighbours.py): what `mlx-edge run` does by
  default below 1,000 rows with no unlabeled text (`none` sets teacher_edits = 0);
- `edits+unlabeled`: both transfer sets;

`--broad-text N|auto` sets `[data] broad_text` of every arm (default: `auto` for the arms with a
transfer set, 10,000 of WordNet's English example sentences below 5,000 rows of which a tenth are
English; `0` for `none`); use another --work to compare with and without. `--arms none --broad-text
auto` is what `mlx-edge run` does with labels only from 1,000 to 5,000 rows. `--word-bags N` sets the
word bags the edits stage writes at 20 edits per row (augment/bags.py; default the pipeline's 10,000;
`0`: none), to compare the edits arm with and without them (another --work, or the same teacher given).
`--distill KEY=VALUE` (repeatable) sets any `[distill]` setting of every arm; run in the --work of an
earlier run, an arm keeps its teacher, edits and bags (their stages are done) and redistills alone.

The arms of one size and seed share one teacher: the first arm trains it (or one an earlier run left
in the same --work directory is reused), the others are given it, so they differ in the transfer set only.
Where the teacher self-trains on the unlabeled text (`[teacher] self_train`: by default below 1,000 labeled
training rows), the arms with unlabeled text share one such teacher and the others the plain one;

and the baseline every arm must beat: a logistic regression on the teacher's frozen embeddings
(mean-pooled over real tokens, "query: " prefix as e5 expects) trained on the same labeled rows.
Each row: teacher and student accuracy on the test set (all, English, Chinese), retained share,
minutes per stage, and the distill's transfer rows, epochs and steps. Runs one pipeline at a time:
run it alone on the machine. An arm with a transfer set leaves a targets cache of several GB
(hidden states and attention maps of every row); `--drop-targets` deletes each after its result.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
import tomllib
from collections import defaultdict
from pathlib import Path

import numpy as np

import mlx_edge  # noqa: F401  (OpenBLAS before mlx)
from mlx_edge.datasets import todo_split
from mlx_edge.errors import MlxEdgeError
from mlx_edge.teacher.probe import fit_linear_head

sys.path.insert(0, str(Path(__file__).resolve().parent))
from public_sets import SETS, split_path  # noqa: E402  (benchmarks/ is not a package)

DATASETS = ("todo", *SETS)


def dataset_split(dataset: str, split: str) -> Path:
    return todo_split(split) if dataset == "todo" else split_path(dataset, split)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def sample(rows: list[dict], size: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(size rows drawn per label in proportion, the rest), seeded."""
    by_label = defaultdict(list)
    for row in rows:
        by_label[row["label"]].append(row)
    rng = random.Random(seed)
    picked = []
    for label in sorted(by_label):
        group = by_label[label][:]
        rng.shuffle(group)
        picked += group[: max(1, round(size * len(group) / len(rows)))]
    picked = picked[:size]
    chosen = {id(r) for r in picked}
    return picked, [r for r in rows if id(r) not in chosen]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def embeddings(model_dir: Path, texts: list[str]) -> np.ndarray:
    """Mean-pooled last hidden states of the frozen teacher body, "query: " prefix."""
    import mlx.core as mx

    from mlx_edge.models.checkpoint import load_model
    from mlx_edge.models.tokenizer import load_tokenizer

    model = load_model(model_dir, labels=["a", "b"])
    model.eval()
    tokenizer = load_tokenizer(model_dir)
    out = []
    for start in range(0, len(texts), 64):
        ids = tokenizer.encode_batch([f"query: {t}" for t in texts[start : start + 64]], max_length=128)
        width = max(len(x) for x in ids)
        batch = np.full((len(ids), width), tokenizer.pad_id, np.int32)
        mask = np.zeros((len(ids), width), np.int32)
        for i, x in enumerate(ids):
            batch[i, : len(x)], mask[i, : len(x)] = x, 1
        hidden = model(mx.array(batch), mx.array(mask)).last_hidden
        m = mx.array(mask, dtype=mx.float32)[..., None]
        out.append(np.array((hidden * m).sum(axis=1) / m.sum(axis=1)))
    return np.concatenate(out)


def probe(teacher: str, train: list[dict], test: list[dict]) -> dict:
    from mlx_edge.models.builtin import resolve_model

    model_dir = Path(resolve_model(teacher, progress=False))
    labels = sorted({r["label"] for r in train + test})
    index = {label: i for i, label in enumerate(labels)}
    x_train = embeddings(model_dir, [r["text"] for r in train])
    x_test = embeddings(model_dir, [r["text"] for r in test])
    weight, bias = fit_linear_head(x_train, np.array([index[r["label"]] for r in train]), len(labels))
    pred = (x_test @ weight.T + bias).argmax(axis=1)
    right = pred == np.array([index[r["label"]] for r in test])
    langs = np.array([r.get("lang", "?") for r in test])
    return {"all": float(right.mean()), **{lang: float(right[langs == lang].mean()) for lang in sorted(set(langs))}}


ARMS = ("none", "unlabeled", "edits", "edits+unlabeled")


def run_arm(
    arm: str,
    labeled: Path,
    rest: Path,
    test: Path,
    teacher: str,
    out: Path,
    seed: int,
    edits: int,
    head: str | None,
    student: str | None = None,
    bundles: tuple[str, ...] = ("fp16",),
    calibrate: bool = True,
    distill_epochs: int | None = None,
    blend: float | None = None,
    refit: str | None = None,
    self_train: str | None = None,
    broad_text: int | str | None = None,
    distill: dict | None = None,
) -> dict:
    from mlx_edge.pipeline import PipelineConfig, run_pipeline
    from mlx_edge.settings import TEACHER
    from mlx_edge.teacher import self_train as self_training

    rows = sum(1 for _ in open(labeled, encoding="utf-8"))
    train_rows = rows - round(rows * TEACHER.dev_fraction)  # about the pipeline's split

    def own_teacher(name: str) -> bool:  # whether the arm's teacher self-trains on its unlabeled text
        has_text = "unlabeled" in name.split("+")
        return self_training.applies(self_train or TEACHER.self_train, train_rows, has_text)

    # the size and seed's teacher, when another arm of the same kind made it (an arm run again keeps its own)
    trained = [
        p
        for p in sorted(out.parent.glob("*/teacher/model.safetensors"))
        if p.parents[1] != out and own_teacher(p.parents[1].name) == own_teacher(arm)
    ]
    if broad_text is None and arm == "none":  # no transfer set: auto would make one of broad text
        broad_text = 0
    config = PipelineConfig(
        out=out,
        train=labeled,
        test=test,
        seed=seed,
        bundles=bundles,
        teacher={"dir": str(trained[0].parent)}
        if trained
        else {
            "model": teacher,
            **({"head": head} if head else {}),
            **({"blend": blend} if blend is not None else {}),
            **({"refit": refit} if refit else {}),
            **({"self_train": self_train} if self_train else {}),
        },
        unlabeled=(rest,) if "unlabeled" in arm.split("+") else (),
        teacher_edits=edits if "edits" in arm.split("+") else 0,
        **({"broad_text": broad_text} if broad_text is not None else {}),
        distill={
            "calibrate": calibrate,
            **({"student": student} if student else {}),
            **({"epochs": distill_epochs} if distill_epochs else {}),
            **(distill or {}),
        },
    )
    start = time.perf_counter()
    try:
        report = run_pipeline(config, progress=False)
    except MlxEdgeError as exc:  # e.g. a bundle's export refused by its own parity check
        return {"error": str(exc), "total_minutes": round((time.perf_counter() - start) / 60, 1)}
    test_scores = report["accuracy"]["test"]
    distilled = _distill_report(out)  # what the distill ran: its transfer rows, epochs and steps
    by_language = report["accuracy_by_language"]["test"]
    return {
        "teacher": test_scores["teacher"],
        "student": test_scores["student"],
        "retained": report["retained"]["test"],
        "by_language": by_language,
        "minutes": {s["name"]: round(s["seconds"] / 60, 1) for s in report["stages"]},
        "total_minutes": round((time.perf_counter() - start) / 60, 1),
        "notes": report.get("notes", []),
        "check": report["check"],
        **{key: distilled.get(key) for key in ("soft_label_temperature", "transfer_rows", "epochs_run", "steps")},
        "teacher_self_train": _teacher_manifest(out).get("self_train"),
    }


def _teacher_manifest(out: Path) -> dict:
    path = out / "teacher" / "mlx_edge_manifest.json"  # a teacher the arm trained itself
    return json.loads(path.read_text()) if path.is_file() else {}


def _distill_report(out: Path) -> dict:
    path = out / "student" / "report.json"  # distill's report, beside the student the pipeline kept
    return json.loads(path.read_text()) if path.is_file() else {}


def distill_setting(text: str) -> tuple[str, object]:
    """--distill's KEY=VALUE: the value read as a config's TOML reads it, else as the string written."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE, e.g. hidden_weight=0")
    try:
        return key.strip(), tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key.strip(), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="todo", choices=DATASETS)
    parser.add_argument("--sizes", default="100,300")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"any of {', '.join(ARMS)}")
    parser.add_argument("--edits", type=int, default=20, help="teacher_edits of the edits arms: sentences per row")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--teacher", default="multilingual-e5-small")
    parser.add_argument(
        "--teacher-head", choices=("auto", "new", "probe"), default=None, help="[teacher] head (default: its default)"
    )
    parser.add_argument("--teacher-blend", type=float, default=None, help="[teacher] blend (default: its default)")
    parser.add_argument(
        "--teacher-refit", choices=("auto", "yes", "no"), default=None, help="[teacher] refit (default: its default)"
    )
    parser.add_argument(
        "--teacher-self-train",
        choices=("auto", "yes", "no"),
        default=None,
        help="[teacher] self_train (default: its default)",
    )
    parser.add_argument("--student", default=None, help="[distill] student (default: its default, auto)")
    parser.add_argument("--bundles", default="fp16", help="bundles the pipeline makes and checks, e.g. fp16,int8")
    parser.add_argument(
        "--no-calibrate",
        action="store_true",
        help="[distill] calibrate = false (the teacher's soft labels as they are)",
    )
    parser.add_argument("--distill-epochs", type=int, default=None, help="[distill] epochs (default: its default)")
    parser.add_argument(
        "--distill",
        type=distill_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any [distill] setting of every arm, as a config writes it (repeat it: --distill hidden_weight=0 "
        "--distill attention_weight=0). In the --work of an earlier run the arm keeps its teacher and edits",
    )
    parser.add_argument(
        "--broad-text",
        type=lambda v: v if v == "auto" else int(v),
        default=None,
        help="[data] broad_text of every arm: auto or a count (default: auto, 0 for the arm none)",
    )
    parser.add_argument(
        "--word-bags",
        type=int,
        default=None,
        help="word bags of the edits arms at 20 edits per row (default: the pipeline's, 10,000; 0: none)",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/transfer_set"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--drop-targets",
        action="store_true",
        help="delete each arm's targets cache after its result (GBs each with a transfer set; "
        "running the same arm again labels again)",
    )
    args = parser.parse_args()
    if args.word_bags is not None:  # the pipeline's count at the default 20 edits per row (no config key)
        from mlx_edge import pipeline as pipeline_module

        pipeline_module.WORD_BAGS = args.word_bags
    rows_all = read_rows(dataset_split(args.dataset, "train"))
    test_path = dataset_split(args.dataset, "test")
    test_rows = read_rows(test_path)
    results = []
    for size in [int(s) for s in args.sizes.split(",")]:
        for seed in [int(s) for s in args.seeds.split(",")]:
            base = args.work / f"n{size}-s{seed}"
            base.mkdir(parents=True, exist_ok=True)
            labeled, rest = sample(rows_all, size, seed)
            labeled_path = write_jsonl(base / "labeled.jsonl", labeled)
            rest_path = base / "rest.txt"
            rest_path.write_text("".join(r["text"].replace("\n", " ") + "\n" for r in rest), encoding="utf-8")
            line = {
                "dataset": args.dataset,
                "size": size,
                "seed": seed,
                "probe": probe(args.teacher, labeled, test_rows),
            }
            print(json.dumps(line), flush=True)
            for arm in args.arms.split(","):
                if arm not in ARMS:
                    parser.error(f"unknown arm {arm!r}: use any of {', '.join(ARMS)}")
                result = run_arm(
                    arm,
                    labeled_path,
                    rest_path,
                    test_path,
                    args.teacher,
                    base / arm,
                    seed,
                    args.edits,
                    args.teacher_head,
                    args.student,
                    tuple(args.bundles.split(",")),
                    not args.no_calibrate,
                    args.distill_epochs,
                    args.teacher_blend,
                    args.teacher_refit,
                    args.teacher_self_train,
                    args.broad_text,
                    dict(args.distill),
                )
                if args.drop_targets:
                    shutil.rmtree(base / arm / "targets", ignore_errors=True)
                row = {"dataset": args.dataset, "size": size, "seed": seed, "arm": arm, "probe": line["probe"]["all"]}
                row.update(result)
                results.append(row)
                print(json.dumps(row), flush=True)
    print("\nsize seed arm        probe  teacher student retained  en(t/s)      zh(t/s)      minutes", file=sys.stderr)
    for r in results:
        if "error" in r:
            print(f"{r['size']:>4} {r['seed']:>4} {r['arm']:<10} error: {r['error']}", file=sys.stderr)
            continue
        lang = {k: f"{v['teacher']:.1%}/{v['student']:.1%}" for k, v in r["by_language"].items()}
        print(
            f"{r['size']:>4} {r['seed']:>4} {r['arm']:<10} {r['probe']:6.1%} {r['teacher']:8.1%} {r['student']:7.1%}"
            f" {r['retained']:8.1%}  {lang.get('en', '-'):<12} {lang.get('zh', '-'):<12} {r['total_minutes']}",
            file=sys.stderr,
        )
    for line in seed_spread(results):
        print(line, file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def seed_spread(results: list[dict]) -> list[str]:
    """For each size and arm run on several seeds: the mean and the range of teacher, student and retained,
    so that a margin smaller than the draws' spread is read as one."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for r in results:
        if "error" not in r:
            groups.setdefault((r["size"], r["arm"]), []).append(r)
    lines = []
    for (size, arm), rows in groups.items():
        if len(rows) < 2:
            continue
        cells = []
        for key in ("teacher", "student", "retained"):
            values = [r[key] for r in rows]
            cells.append(f"{key} {np.mean(values):.1%} ({min(values):.1%}-{max(values):.1%})")
        lines.append(f"{size:>4} {arm:<10} over {len(rows)} seeds: " + ", ".join(cells))
    return (["\nmean (range) over seeds:"] + lines) if lines else []


if __name__ == "__main__":
    main()
