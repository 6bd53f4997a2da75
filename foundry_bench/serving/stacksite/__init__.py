"""The folder `foundry bench --stacks` puts first on the engines' path: sitecustomize.py starts
foundry_stack_sampler.py in every process they start."""
