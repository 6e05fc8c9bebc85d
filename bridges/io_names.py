"""The names of the programs' inputs and outputs (CoreML, ONNX), in a module that imports nothing heavy:
running an exported program needs neither PyTorch nor coremltools."""

INPUT_IDS, ATTENTION_MASK = "input_ids", "attention_mask"
EMBEDDING, LOGITS, PROBABILITIES = "embedding", "logits", "probabilities"
