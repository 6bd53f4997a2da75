"""The deterministic allocation region (native part: csrc/region.c)."""
