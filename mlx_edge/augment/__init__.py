"""`mlx-edge augment`: grow a small labeled set with a local LLM (mlx-lm) or cheap token edits,
deduplicated, balanced, and cleaned by the teacher. See `api.augment`.
"""
