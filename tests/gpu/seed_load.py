# The seed README's LOAD example, as written; only the last line (reporting the output) is added.
import json

import torch

import foundry as fdry

torch.cuda.init()
device = torch.device("cuda:0")
torch.set_default_device(device)

# Load CUDA modules and libraries from archive
fdry.load_cuda_modules_and_libraries("hook_archive")

# Set up the same allocation region as capture
BASE_ADDR = 0x7F0000000000
region_size = fdry.parse_size("1GB")
fdry.set_allocation_region(BASE_ADDR, region_size)

# Allocate input tensors (can have different values)
input_a = torch.full((100, 100), 5.0, device=device)
input_b = torch.full((100, 100), 3.0, device=device)

# Load and replay the graph (NOTE: auto-loads .cugraph binary when available)
graph, output_tensor = fdry.CUDAGraph.load("graph.json")
graph.replay()
torch.cuda.synchronize()

# output_tensor now contains the result
fdry.stop_allocation_region()
print(json.dumps({"result": output_tensor.flatten().tolist()}))
