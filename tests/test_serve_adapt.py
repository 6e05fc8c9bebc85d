"""The LoRA job of `mlx-edge serve`: a real server runs mlx_edge.augment.adapt (mlx-lm's trainer) on a tiny
random qwen2 built here; the job's live metrics carry the loss per step (falling), tokens/s and peak
memory; the downloaded adapter is one `mlx-edge augment --adapter` takes."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

from click.testing import CliRunner

from mlx_edge.cli import main
from tests.helpers.browser import Server, login, wait_for
from tests.helpers.llm import build_tiny_llm
from tests.helpers.tiny import write_jsonl

# Two classes of near-identical sentences: a LoRA learns them within a few dozen steps (as in test_augment_adapt).
ROWS = [{"text": f"pay the credit card bill {d}", "label": "finance"} for d in "0123"] + [
    {"text": f"run in the park at {d}", "label": "health"} for d in "0123"
]


def test_adapt_job_trains_an_adapter_that_augment_uses(tmp_path):
    llm = build_tiny_llm(tmp_path / "tiny-qwen2")
    rows = write_jsonl(tmp_path / "labeled.jsonl", ROWS)
    server = Server(tmp_path / "work", args=("--models", str(tmp_path))).start()
    try:
        client, token = login(server.url)
        form = {
            "csrf_token": token,
            "kind": "adapt",
            "model": str(llm),
            "rank": "8",
            "epochs": "12",
            "batch_size": "2",
            "learning_rate": "1e-2",
            "max_seq_length": "512",
        }
        created = client.post("/jobs", data=form, files={"data_file": ("labeled.jsonl", rows.read_bytes())})
        assert created.status_code == 303, created.text
        job = int(created.headers["location"].rsplit("/", 1)[1])
        final = wait_for(lambda: (s := client.get(f"/api/jobs/{job}").json())["final"] and s, 240, "the adapt job")
        assert final["status"] == "done", final["error"]
        page = client.get(f"/jobs/{job}").text
        download = client.get(f"/jobs/{job}/download")
    finally:
        server.stop()

    assert final["device"].startswith("MLX ") and final["stages"] == {"adapt": "done"}
    assert final["speed"].endswith("tokens/s") and final["peak_rss_mb"] > 0
    losses = {m["step"]: m["value"] for m in final["metrics"] if m["name"] == "loss"}
    steps = sorted(losses)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) == 12 * 4 // 2  # 4 pairs an epoch, batch 2
    first, last = sum(losses[s] for s in steps[:5]) / 5, sum(losses[s] for s in steps[-5:]) / 5
    assert last < first - 0.5, (first, last)
    assert {m["name"] for m in final["metrics"]} >= {"loss", "tokens/s", "peak_memory_mb"}
    assert "adapter saved" in page and "Loss, first → last step" in page

    assert download.status_code == 200
    with zipfile.ZipFile(io.BytesIO(download.content)) as archive:
        archive.extractall(tmp_path / "unzipped")
    adapter = tmp_path / "unzipped" / "adapter"
    assert (adapter / "adapters.safetensors").is_file() and (adapter / "adapter_config.json").is_file()

    out = tmp_path / "synthetic.jsonl"
    args = ["augment", "--seeds", rows, "--llm", llm, "--adapter", adapter, "--per-class", 1, "--max-rounds", 1]
    args += ["--batch-size", 1, "--max-tokens", 12, "--min-chars", 1, "--out", out, "--json", "--quiet"]
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    sha = hashlib.sha256((adapter / "adapters.safetensors").read_bytes()).hexdigest()
    assert json.loads(result.output)["adapter"]["sha256"] == sha
