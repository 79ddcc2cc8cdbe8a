"""Tokens/s against references: `bench` (every method, each backend's own generation, the llama-cpp-python loop of
`llama_reference`) and Spec-Bench's suite (`specbench`). Imports the rooms below it.
"""
