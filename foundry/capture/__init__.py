"""The torch-facing API: capture with PyTorch, save, and get tensors back after LOAD."""
