"""A LoRA adapter directory as mlx-lm writes and reads it, and the base model it belongs to.

`mlx-edge augment adapt` writes `adapters.safetensors` and `adapter_config.json` (mlx-lm's names and
keys, so `mlx_lm.load(model, adapter_path=DIR)` reads it), with the base model's identity under the
config's `mlx_edge` key. `augment --adapter DIR` checks that identity against its --llm before
loading anything: an adapter applied to another model loads without a word when the shapes agree,
and writes nonsense.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mlx_edge.augment.generate import is_local, resolve_llm
from mlx_edge.errors import ModelError
from mlx_edge.fileio import sha256_file
from mlx_edge.models.builtin_llm import is_builtin_llm

WEIGHTS = "adapters.safetensors"
CONFIG = "adapter_config.json"
REPORT = "adapt_report.json"


def base_identity(llm: str, *, progress: bool = True) -> dict:
    """What makes `llm` this very model: for a built-in name or a local directory, the sha256 of its
    config.json and of its weights (a copy elsewhere is the same model); for a hub id, the id."""
    if not (is_builtin_llm(llm) or is_local(llm)):
        return {"llm": llm}
    path = Path(resolve_llm(llm, progress=progress)).expanduser()
    weights = hashlib.sha256()
    for file in sorted(path.glob("*.safetensors")):
        weights.update(f"{file.name}:{sha256_file(file)}\n".encode())
    return {
        "llm": llm,
        "config_sha256": sha256_file(path / "config.json"),
        "weights_sha256": weights.hexdigest(),
    }


def same_base(recorded: dict, given: dict) -> bool:
    if "weights_sha256" in recorded and "weights_sha256" in given:
        return all(recorded[k] == given[k] for k in ("config_sha256", "weights_sha256"))
    return recorded.get("llm") == given.get("llm")  # a hub id: the name is all there is to compare


def check_adapter(adapter: Path, llm: str, *, progress: bool = True) -> dict:
    """The adapter's record for a manifest ({"path", "sha256"}), once it is known to be a complete
    adapter directory made for `llm`; else one ModelError line that says which --llm it needs."""
    adapter = Path(adapter).expanduser()
    if not adapter.is_dir():
        raise ModelError(
            f"adapter directory {adapter} does not exist" if not adapter.exists() else f"{adapter} is not a directory",
            "pass the --out directory of mlx-edge augment adapt",
        )
    missing = [name for name in (WEIGHTS, CONFIG) if not (adapter / name).is_file()]
    if missing:
        raise ModelError(
            f"{adapter} is not a LoRA adapter directory (no {' or '.join(missing)})",
            "pass the --out directory of mlx-edge augment adapt (or of mlx_lm.lora)",
        )
    config = read_config(adapter)
    recorded = (config.get("mlx_edge") or {}).get("base")
    if isinstance(recorded, dict) and not same_base(recorded, base_identity(llm, progress=progress)):
        raise ModelError(
            f"the adapter {adapter} was trained on another base model ({recorded.get('llm')}), not on {llm}",
            f"pass --llm {recorded.get('llm')}, or adapt {llm} with mlx-edge augment adapt",
        )
    return {"path": str(adapter.resolve()), "sha256": sha256_file(adapter / WEIGHTS)}


def read_config(adapter: Path) -> dict:
    try:
        config = json.loads((adapter / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{adapter / CONFIG} is unreadable ({exc})", "make the adapter again") from None
    if not isinstance(config, dict) or not isinstance(config.get("lora_parameters"), dict):
        raise ModelError(f"{adapter / CONFIG} has no lora_parameters", "make the adapter again")
    return config
