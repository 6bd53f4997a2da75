"""Kernel images: what the process loaded (native part: csrc/registry.c) and what LOAD restores."""
