"""Tiny LLMs made here, never downloaded: a random mlx-lm qwen2 directory, and a random llama written as
a 4-bit GGUF the way llama.cpp's converter writes one (q/k rows permuted for its rope, Q4_1 blocks)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Labeled seeds the augment tests share: two classes, three each.
AUGMENT_SEEDS = [
    {"text": "pay the credit card bill", "label": "finance"},
    {"text": "pay bill", "label": "finance"},
    {"text": "card credit pay", "label": "finance"},
    {"text": "book a dentist appointment", "label": "health"},
    {"text": "run in the park", "label": "health"},
    {"text": "dentist run", "label": "health"},
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "pay the credit card bill",
    "book a dentist appointment",
    "run in the park at 7",
    "交房租和水电费",
    "Write new examples of the class, one per line",
    "transfer 250 dollars on 2024-03-15",
]


def _bpe(pre_tokenizer, vocab_size: int = 300):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizer
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tk.train_from_iterator(CORPUS * 5, trainer)
    return tk


def build_tiny_llm(directory: Path) -> Path:
    """A random 1-layer qwen2 with a byte-level BPE tokenizer and a ChatML template, as mlx-lm loads it."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen2
    from tokenizers import pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    tk = _bpe(pre_tokenizers.ByteLevel(add_prefix_space=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    fast.save_pretrained(directory)
    config = {
        "model_type": "qwen2",
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "rms_norm_eps": 1e-6,
        "vocab_size": tk.get_vocab_size(),
        "max_position_embeddings": 512,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "eos_token_id": tk.token_to_id("<|im_end|>"),
    }
    (directory / "config.json").write_text(json.dumps(config))
    mx.random.seed(0)
    model = qwen2.Model(qwen2.ModelArgs.from_dict(config))
    mx.save_safetensors(str(directory / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return directory


# ---- a tiny llama GGUF ----

LLAMA = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 96, "rope_theta": 10000.0, "eps": 1e-5}
HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def smollm_tokenizer():
    """The tiny BPE with SmolLM2's pre-tokenizer (each digit alone, then GPT-2's split): the reference."""
    from tokenizers import pre_tokenizers

    pre = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    return _bpe(pre)


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's `permute` of q/k rows (Hugging Face half-split -> interleaved rope)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tiny_llama_weights(vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights under Hugging Face llama names (tied embeddings: no lm_head)."""
    rng = np.random.default_rng(seed)
    h, f, head_dim = LLAMA["hidden"], LLAMA["ffn"], LLAMA["hidden"] // LLAMA["heads"]
    shapes = {
        "self_attn.q_proj": (h, h),
        "self_attn.k_proj": (LLAMA["kv_heads"] * head_dim, h),
        "self_attn.v_proj": (LLAMA["kv_heads"] * head_dim, h),
        "self_attn.o_proj": (h, h),
        "mlp.gate_proj": (f, h),
        "mlp.up_proj": (f, h),
        "mlp.down_proj": (h, f),
    }
    weights = {
        "model.embed_tokens.weight": rng.normal(0, 0.5, (vocab, h)),
        "model.norm.weight": 1 + rng.normal(0, 0.1, h),
    }
    for i in range(LLAMA["layers"]):
        for name, shape in shapes.items():
            weights[f"model.layers.{i}.{name}.weight"] = rng.normal(0, 0.3, shape)
        for name in ("input_layernorm", "post_attention_layernorm"):
            weights[f"model.layers.{i}.{name}.weight"] = 1 + rng.normal(0, 0.1, h)
    return {k: v.astype(np.float32) for k, v in weights.items()}


def q4_1_roundtrip(w: np.ndarray) -> np.ndarray:
    """What a Q4_1 tensor holds, as float32 (gguf's own quantize and dequantize)."""
    import gguf

    kind = gguf.GGMLQuantizationType.Q4_1
    return gguf.quants.dequantize(gguf.quants.quantize(w, kind), kind).astype(np.float32)


def write_tiny_llama_gguf(path: Path, seed: int = 0) -> tuple[Path, dict[str, np.ndarray]]:
    """A random llama as llama.cpp writes it (gguf's writer; 2-D weights Q4_1, norms F32; tokenizer,
    chat template). Returns the path and the Hugging Face-layout float32 weights the file holds."""
    import gguf

    tk = smollm_tokenizer()
    model = json.loads(tk.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    weights = tiny_llama_weights(len(tokens), seed)
    head_dim = LLAMA["hidden"] // LLAMA["heads"]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LLAMA["layers"])
    writer.add_context_length(256)
    writer.add_embedding_length(LLAMA["hidden"])
    writer.add_feed_forward_length(LLAMA["ffn"])
    writer.add_head_count(LLAMA["heads"])
    writer.add_head_count_kv(LLAMA["kv_heads"])
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(LLAMA["rope_theta"])
    writer.add_layer_norm_rms_eps(LLAMA["eps"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|im_end|>"))
    writer.add_unk_token_id(tokens.index("<|endoftext|>"))
    writer.add_chat_template(CHATML)
    held = {}
    for name, w in weights.items():
        if name.startswith("model.layers."):
            _, _, layer, *rest = name.split(".")
            module = ".".join(rest[:-1])
            gguf_name = f"blk.{layer}.{HF_TO_GGUF[module]}.weight"
        else:
            gguf_name = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}[
                name
            ]
        if w.ndim == 1:
            writer.add_tensor(gguf_name, w)
            held[name] = w
            continue
        on_disk = w
        if gguf_name.endswith(("attn_q.weight", "attn_k.weight")):
            on_disk = llama_cpp_permute(w, LLAMA["heads"] if "attn_q" in gguf_name else LLAMA["kv_heads"])
        kind = gguf.GGMLQuantizationType.Q4_1
        writer.add_tensor(gguf_name, gguf.quants.quantize(on_disk, kind), raw_dtype=kind)
        held[name] = q4_1_roundtrip(w)  # blocks run along rows, so quantizing commutes with the row permutation
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, held


# ---- a tiny Gemma 3 GGUF ----

GEMMA = {"hidden": 64, "layers": 6, "heads": 2, "kv_heads": 1, "head_dim": 32, "ffn": 96, "eps": 1e-6}
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
GEMMA_TEXT = "- pay the rent\n- 交房租和水电费\n- book a dentist"
GEMMA_LAYER = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}


def gemma_tokens() -> list[str]:
    """A small SentencePiece table as a Gemma GGUF lists it: specials, the 256 byte pieces, single characters
    of GEMMA_TEXT (spaces as ▁), then a few longer pieces whose halves are in the table (merges are rebuilt
    from the order)."""
    chars = sorted(set(GEMMA_TEXT.replace(" ", "\u2581")) - {"\n"})
    longer = [
        "\u2581p",
        "\u2581pa",
        "\u2581pay",
        "\u2581t",
        "\u2581th",
        "\u2581the",
        "re",
        "nt",
        "\u2581re",
        "\u2581rent",
    ]
    return [*GEMMA_SPECIALS, "\n", *(f"<0x{b:02X}>" for b in range(256)), *chars, *longer]


def tiny_gemma_weights(vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights under Hugging Face gemma3_text names, norms as Gemma holds them (w, used as 1 + w)."""
    rng = np.random.default_rng(seed)
    h, f, d = GEMMA["hidden"], GEMMA["ffn"], GEMMA["head_dim"]
    q, kv = GEMMA["heads"] * d, GEMMA["kv_heads"] * d
    shapes = {
        "self_attn.q_proj": (q, h),
        "self_attn.k_proj": (kv, h),
        "self_attn.v_proj": (kv, h),
        "self_attn.o_proj": (h, q),
        "mlp.gate_proj": (f, h),
        "mlp.up_proj": (f, h),
        "mlp.down_proj": (h, f),
    }
    norms = {
        "self_attn.q_norm": d,
        "self_attn.k_norm": d,
        "input_layernorm": h,
        "post_attention_layernorm": h,
        "pre_feedforward_layernorm": h,
        "post_feedforward_layernorm": h,
    }
    weights = {"model.embed_tokens.weight": rng.normal(0, 0.5, (vocab, h)), "model.norm.weight": rng.normal(0, 0.3, h)}
    for i in range(GEMMA["layers"]):
        for name, shape in shapes.items():
            weights[f"model.layers.{i}.{name}.weight"] = rng.normal(0, 0.2, shape)
        for name, size in norms.items():
            weights[f"model.layers.{i}.{name}.weight"] = rng.normal(0, 0.3, size)
    return {k: v.astype(np.float32) for k, v in weights.items()}


def write_tiny_gemma3_gguf(path: Path, seed: int = 0) -> tuple[Path, dict[str, np.ndarray]]:
    """A random Gemma 3 as llama.cpp writes it: norms stored as 1 + w, the embedding and the attention
    projections Q8_0 (the rest float32), a SentencePiece table with no merges, no chat template. Returns the
    path and the Hugging Face-layout float32 weights the file holds."""
    import gguf

    tokens = gemma_tokens()
    weights = tiny_gemma_weights(len(tokens), seed)
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_block_count(GEMMA["layers"])
    writer.add_context_length(512)
    writer.add_embedding_length(GEMMA["hidden"])
    writer.add_feed_forward_length(GEMMA["ffn"])
    writer.add_head_count(GEMMA["heads"])
    writer.add_head_count_kv(GEMMA["kv_heads"])
    writer.add_key_length(GEMMA["head_dim"])
    writer.add_value_length(GEMMA["head_dim"])
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(GEMMA["eps"])
    writer.add_sliding_window(512)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types([3 if t in GEMMA_SPECIALS else 6 if t.startswith("<0x") else 1 for t in tokens])
    for key, value in (("bos", 2), ("eos", 1), ("unk", 3), ("pad", 0)):
        getattr(writer, f"add_{key}_token_id")(value)
    writer.add_add_bos_token(True)
    held = {}
    for name, w in weights.items():
        if name.startswith("model.layers."):
            _, _, layer, *rest = name.split(".")
            gguf_name = f"blk.{layer}.{GEMMA_LAYER['.'.join(rest[:-1])]}.weight"
        else:
            gguf_name = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}[
                name
            ]
        if name.endswith("norm.weight"):
            writer.add_tensor(gguf_name, w + 1.0)  # llama.cpp's Gemma converter adds the 1
            held[name] = w
        elif "embed" in name or "self_attn" in name:
            kind = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(gguf_name, gguf.quants.quantize(w, kind), raw_dtype=kind)
            held[name] = gguf.quants.dequantize(gguf.quants.quantize(w, kind), kind).astype(np.float32)
        else:
            writer.add_tensor(gguf_name, w)
            held[name] = w
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, held
