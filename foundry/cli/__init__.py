"""The `foundry` command line."""
