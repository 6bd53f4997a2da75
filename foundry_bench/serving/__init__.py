"""What the serving-engine benchmarks (`foundry bench --engine vllm | sglang`) share: the engine processes
(process.py, the child protocol in protocol.py), the requests (workload.py), the model shapes (shapes.py),
the runs' order and budget (runs.py), the statistics (stats.py) and the report's tables and plot (report.py).
Torch-free; each engine's package says how its processes start and what its logs hold."""
