"""A micro `mlx-edge run` config: the tiny teacher, a 1-layer student, the toy data (test_pipeline, test_ladder)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from mlx_edge.cli import main

MICRO_STUDENT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48}


def write_config(tmp_path: Path, base_dir: Path, toy_data, bundles=("fp16",), data=None, **distill) -> Path:
    (tmp_path / "student.json").write_text(json.dumps(MICRO_STUDENT))
    distill_section = {
        "student": str(tmp_path / "student.json"),
        "init": "random",
        "epochs": 2,
        "learning_rate": 2e-3,
        "batch_size": 16,
        "hidden_weight": "1",
        **distill,
    }
    lines = (
        [
            "[pipeline]",
            f'out = "{tmp_path / "work"}"',
            f"bundles = {json.dumps(list(bundles))}",
            "",
            "[data]",
            f'train = "{toy_data[0]}"',
            f'dev = "{toy_data[1]}"',
            f'test = "{toy_data[1]}"',
            # 0: tiny runs (auto makes a transfer set of a few-row file: minutes, not seconds)
            *[f"{k} = {json.dumps(v)}" for k, v in {"teacher_edits": 0, "broad_text": 0, **(data or {})}.items()],
            "",
            "[teacher]",
            f'model = "{base_dir}"',
            "epochs = 3",
            "min_steps = 0",
            "learning_rate = 1e-3",
            "batch_size = 16",  # 48 steps: at the default 32 (24 steps) the random tiny teacher learned the toy set only sometimes
            "max_length = 32",
            "",
            "[distill]",
        ]
        + [f"{k} = {json.dumps(v)}" for k, v in distill_section.items()]
        + ["", "[export]", 'seq_len = "16"']
    )
    path = tmp_path / "pipeline.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_stages(config: Path) -> list[dict]:
    """`mlx-edge run CONFIG --quiet` on a write_config config, asserted to succeed; the report's stages
    in the order they ran (name, status "ran" | "skipped (up to date)" | "given", seconds)."""
    result = CliRunner().invoke(main, ["run", str(config), "--quiet"])
    assert result.exit_code == 0, result.output
    return json.loads((Path(config).parent / "work" / "report.json").read_text())["stages"]
