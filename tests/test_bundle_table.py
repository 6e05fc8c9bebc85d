"""The bundle table (issue 16): one row per bundle, its numbers computed from the bundle's own files
and an independent pass of the student, not from what the exporter reported."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np

from mlx_edge.bundle.table import BundleRow, bundle_row, format_rows
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.exports import exported, tiny_student


def test_a_row_measures_the_bundle_and_the_student():
    student, bundle = tiny_student(), exported()
    texts = [f"text number {i} about work and travel" for i in range(10)] + ["", "旅行 预订 酒店"]
    # gold labels and teacher predictions chosen here: the row must count against them
    model, tokenizer = load_model(student, require_head=True), load_tokenizer(student)
    width = json.loads((bundle / "manifest.json").read_text())["max_length"]
    own = []
    for ids in tokenizer.encode_batch(texts, max_length=width):
        x = mx.array(np.array(ids, np.int32)[None])
        own.append(int(np.argmax(np.array(model(x, mx.ones(x.shape, dtype=mx.int32)).logits))))
    own = np.array(own)
    gold = own.copy()
    gold[:3] = (gold[:3] + 1) % model.config.num_labels  # the student is wrong on 3 of 12
    teacher = gold.copy()
    teacher[3] = (teacher[3] + 1) % model.config.num_labels  # the teacher on 1 of 12

    row = bundle_row(student, bundle, texts, gold, teacher)
    assert row.dev_accuracy == 9 / 12 and abs(row.retained - (9 / 12) / (11 / 12)) < 1e-12
    assert row.agreement == 8 / 12  # differs where gold moved (3) and where the teacher moved (1)
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert row.bundle_bytes == sum(p.stat().st_size for p in files)
    encoder = [p for p in files if "Encoder.mlpackage" in p.parts]
    assert row.encoder_bytes == sum(p.stat().st_size for p in encoder) > 0
    assert row.head_bytes == (bundle / "Head.mlmodel").stat().st_size
    config = model.config
    assert row.kind == f"bert {config.num_hidden_layers}x{config.hidden_size}" and row.precision == "fp16"
    assert row.mlx_ms > 0 and row.mirror_ms > 0 and row.parameters > 0

    text = format_rows([row, row], markdown=True).splitlines()
    assert len(text) == 4 and text[0].startswith("| student | precision |") and "75.0%" in text[2]
    assert BundleRow(**row.to_dict()) == row  # what the pipeline's report.json stores reads back
