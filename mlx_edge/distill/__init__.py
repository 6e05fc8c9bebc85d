"""Distillation in MLX: the student learns the teacher's answers and its reasoning.

`losses.py` (soft targets, hard labels, hidden states, attention, embeddings), `student.py`
(presets and initialization), `loop.py` (the training loop), `api.py` (`distill(...)`).
"""
