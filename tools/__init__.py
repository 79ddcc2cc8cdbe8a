"""Programs that drive the app rather than being part of it: the load test and the ZeroGPU simulation."""
