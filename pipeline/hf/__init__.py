"""Hugging Face folders: transformers compatibility, what a checkpoint folder holds, its tokenizer files."""
