"""Graphs: turning captured CUgraphs into archive entries (SAVE) and back into executable graphs (LOAD)."""
