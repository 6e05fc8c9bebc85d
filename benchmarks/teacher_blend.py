"""A probe-head teacher's weights mixed with the linear probe it started from (WiSE-FT), share by share.

    .venv/bin/python benchmarks/teacher_blend.py --teacher DIR --labeled ROWS.jsonl [--test FILE]
        [--shares 0,0.25,0.5,0.75,1] [--base multilingual-e5-small]

DIR is a teacher trained with `--head probe --blend 1` (the fine-tuned weights alone) on the rows in
ROWS.jsonl, e.g. a `benchmarks/transfer_set.py` draw's `labeled.jsonl` and its pipeline teacher with
`[teacher] blend = 1`. The start is rebuilt as training builds it: the base model's body, mean pooling,
and a logistic regression fitted on its frozen features of those rows. For each share s the weights
s * fine-tuned + (1 - s) * start are scored on the test set (the shipped to-do test by default);
`[teacher] blend = s` writes exactly those weights when the last epoch is kept. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import mlx_edge  # noqa: F401  (OpenBLAS before mlx)
from mlx_edge.datasets import todo_split


def main() -> None:
    import torch

    from mlx_edge.teacher.probe import fit_linear_head
    from mlx_edge.teacher.source import load_classifier, load_for_training, use_classifier_pooling
    from mlx_edge.teacher.train import blended, pooled_features, predict_ids

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", type=Path, required=True)
    parser.add_argument("--labeled", type=Path, required=True)
    parser.add_argument("--test", type=Path, default=todo_split("test"))
    parser.add_argument("--shares", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--base", default="multilingual-e5-small")
    args = parser.parse_args()
    tuned = load_classifier(args.teacher).eval()
    labels = [tuned.config.id2label[i] for i in range(len(tuned.config.id2label))]
    net, tokenizer = load_for_training(args.base, labels, progress=False)
    use_classifier_pooling(net, "mean")
    max_length = json.loads((args.teacher / "mlx_edge_manifest.json").read_text())["max_length"]

    def rows(path: Path):
        data = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        ids = tokenizer([r["text"] for r in data], truncation=True, max_length=max_length)["input_ids"]
        return [np.asarray(x, np.int32) for x in ids], np.array([labels.index(r["label"]) for r in data])

    (train_ids, train_y), (test_ids, test_y) = rows(args.labeled), rows(args.test)
    pad = tokenizer.pad_token_id or 0
    weight, bias = fit_linear_head(pooled_features(net, train_ids, pad_id=pad, device="cpu"), train_y, len(labels))
    with torch.no_grad():
        net.classifier.weight.copy_(torch.from_numpy(weight))
        net.classifier.bias.copy_(torch.from_numpy(bias))
    start = {name: p.detach().clone() for name, p in net.named_parameters()}
    net.load_state_dict(tuned.state_dict())  # the fine-tuned weights; `blended` mixes the start back in
    scores = {}
    for share in [float(s) for s in args.shares.split(",")]:
        with blended(net, start, share):
            pred = predict_ids(net, test_ids, pad_id=pad, device="cpu")
        scores[str(share)] = round(float((pred == test_y).mean()), 4)
    print(json.dumps({"teacher": str(args.teacher), "rows": len(train_y), "test": scores}), flush=True)


if __name__ == "__main__":
    main()
