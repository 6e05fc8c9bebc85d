"""A Gemma 3 GGUF (the 270M base model, Q4_K_M) -> a directory mlx-lm loads.

What makes the conversion exact, up to MLX's own 8-bit requantization:
- Weights: `mx.load` cannot read K-quant blocks (Q4_K, Q6_K), so the `gguf` package dequantizes
  every tensor to float32. The Linear and Embedding weights are then quantized with MLX's affine
  8-bit groups of 64, which mlx-lm builds from the config's `quantization`; norms stay float.
- Norms: llama.cpp's converter stores Gemma's RMSNorm weights as 1 + w (Gemma multiplies by 1 + w);
  mlx-lm's gemma3_text, like Hugging Face's, holds w: 1 is taken off every `*norm.weight`.
- Names: llama.cpp's (blk.N.attn_q, ...) -> Hugging Face gemma3_text's, which mlx-lm uses. Gemma's
  rope is the half-split (NeoX) one in both, so no rows are permuted.
- Tokenizer: Gemma's SentencePiece table, made into tokenizer.json by transformers' own GGUF
  tokenizer conversion (it fixes the special tokens some GGUFs mislabel: pad 0, eos 1, bos 2, unk 3).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from mlx_edge.errors import ModelError

WEIGHTS_NAME = "model.safetensors"
BITS, GROUP_SIZE = 8, 64
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}


def read_gguf(path: Path):
    from gguf import GGUFReader  # lazy: the gguf package is needed only to convert

    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path} as GGUF ({exc})", "reinstall the package that ships it") from None
    architecture = _field(reader, "general.architecture")
    if architecture != "gemma3":
        raise ModelError(f"{path} is a {architecture} model, not gemma3")
    return reader


def convert_gguf_gemma3(gguf: Path, out: Path) -> None:
    """Write config.json, model.safetensors and the tokenizer files of `gguf` into the directory `out`."""
    from mlx_lm.models.gemma3_text import Model, ModelArgs  # lazy: mlx-lm is needed only to convert and generate

    reader = read_gguf(gguf)
    config = gemma3_config(reader)
    model = Model(ModelArgs.from_dict(config))
    weights = model.sanitize(hf_weights(reader))  # tied: the model drops its lm_head
    model.load_weights(list(weights.items()), strict=True)
    nn.quantize(  # a layer whose rows do not split into whole groups stays float (mlx-lm loads it so)
        model,
        group_size=GROUP_SIZE,
        bits=BITS,
        class_predicate=lambda _, m: hasattr(m, "to_quantized") and m.weight.shape[-1] % GROUP_SIZE == 0,
    )
    config["quantization"] = config["quantization_config"] = {"group_size": GROUP_SIZE, "bits": BITS}
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / WEIGHTS_NAME), dict(tree_flatten(model.parameters())), metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_tokenizer(gguf, out)


def gemma3_config(reader) -> dict:
    """The Hugging Face gemma3_text config of the GGUF's `gemma3.*` keys."""

    def number(key: str, default=None):
        value = _field(reader, f"gemma3.{key}")
        if value is None:
            if default is None:
                raise ModelError(f"the GGUF has no gemma3.{key}", "it is not a complete Gemma 3 GGUF")
            return default
        return value

    heads = int(number("attention.head_count"))
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": int(number("embedding_length")),
        "intermediate_size": int(number("feed_forward_length")),
        "num_hidden_layers": int(number("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(number("attention.head_count_kv", heads)),
        "head_dim": int(number("attention.key_length")),
        "query_pre_attn_scalar": int(number("attention.key_length")),
        "rms_norm_eps": float(str(np.float32(number("attention.layer_norm_rms_epsilon")))),  # 1e-06, not 9.99e-07
        "rope_theta": float(number("rope.freq_base", 1_000_000.0)),
        "rope_local_base_freq": 10_000.0,  # Gemma 3's sliding layers; llama.cpp does not store it
        "sliding_window": int(number("attention.sliding_window")),
        "sliding_window_pattern": 6,  # every sixth layer attends globally (Gemma 3; not stored either)
        "max_position_embeddings": int(number("context_length")),
        "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
        "tie_word_embeddings": True,
        "hidden_activation": "gelu_pytorch_tanh",
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
    }


def hf_weights(reader) -> dict[str, mx.array]:
    """Every tensor dequantized to float32 under its Hugging Face name; norms back to w from 1 + w."""
    from gguf import dequantize  # lazy: the gguf package is needed only to convert

    out = {}
    for tensor in reader.tensors:
        stem = tensor.name.removesuffix(".weight")
        parts = stem.split(".")
        if parts[0] == "blk" and len(parts) == 3 and parts[2] in LAYER_NAMES:
            name = f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}.weight"
        elif stem in TOP_NAMES:
            name = f"{TOP_NAMES[stem]}.weight"
        elif stem == "output":  # an untied head: Gemma 3 ties it, so the model has no place for one
            raise ModelError("the GGUF has an output head of its own; Gemma 3 ties it to the embeddings")
        else:
            continue
        values = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        values = values.reshape([int(d) for d in reversed(tensor.shape)])
        if name.endswith("norm.weight"):
            values = values - 1.0
        out[name] = mx.array(values)
    return out


def save_tokenizer(gguf: Path, out: Path) -> None:
    from transformers import AutoTokenizer  # lazy: transformers is slow to import, needed only here

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(str(out))


def _field(reader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.contents()
    return value.item() if isinstance(value, np.generic) else value
