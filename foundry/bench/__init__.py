"""The cold-start benchmark (`foundry bench`) and the decoder model it measures."""
