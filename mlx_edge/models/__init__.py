"""Models: the MLX BERT (`bert.py`) and loading/saving Hugging Face directories (`checkpoint.py`)."""
