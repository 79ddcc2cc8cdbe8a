"""The two runtimes behind the seam of easd.core.seam: transformers (PyTorch) and llama.cpp (GGUF).

Each module implements `Model`, `Caches` and `Tokenizer` for its runtime, and nothing else; how a
pair is found and loaded is easd.pairs' business. Rule checked by tests/test_layout.py: nothing
here imports `easd.pairs`, `easd.lab`, `easd.cli` or the UI.
"""
