"""The teacher side: fine-tune a Hugging Face BERT-family model (`train`), and run it over text to
write the targets cache the student learns from (`label`)."""
