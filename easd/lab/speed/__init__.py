"""Tokens/s against references. Imports the rooms below it.

timing.py            what every bench times: the prompts, a row's laps, the plan, the rotating order
bench.py             `bench`: every method, each backend's own generation, the ratios and SD taken apart
llama_reference.py   a minimal SD loop written directly against llama-cpp-python, bench's peer
beside.py            `bench --beside`: an SD lane's speed beside another method's rows in one batch
batched.py           `bench --batch-sizes`: total tokens/s with B rows a pass
specbench.py         Spec-Bench's suite, task by task
"""
