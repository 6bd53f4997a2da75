# The seed README's SAVE example, as written; only MyModel and the last lines (which report what the
# natively captured graph computes on LOAD's input values) are added.
import json

import torch

import foundry as fdry


class MyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(100, 100)

    def forward(self, a, b):
        return torch.relu(self.proj(a) * b) + a


torch.cuda.init()
device = torch.device("cuda:0")
torch.set_default_device(device)

# Set up VMM allocation region for deterministic memory addresses
BASE_ADDR = 0x7F0000000000
region_size = fdry.parse_size("1GB")
fdry.set_allocation_region(BASE_ADDR, region_size)

# Allocate input tensors
input_a = torch.full((100, 100), 2.0, device=device)
input_b = torch.full((100, 100), 3.0, device=device)

# Warm up the model
model = MyModel()
model(input_a, input_b)
torch.cuda.synchronize()

# Capture CUDA graph
graph = fdry.CUDAGraph()
with fdry.graph(graph):
    result = model(input_a, input_b)

# Replay and verify
graph.replay()
torch.cuda.synchronize()

# Save graph with output tensors
# Produces BOTH graph.json and graph.cugraph (optimized binary format)
graph.save("graph.json", output_tensors=result)
fdry.stop_allocation_region()

input_a.fill_(5.0)
graph.replay()
torch.cuda.synchronize()
print(json.dumps({"expected_with_new_inputs": result.flatten().tolist()}))
