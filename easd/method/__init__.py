"""The method: settings, acceptance maths, the decoding loop, the trace, what-if, comparison, shared prefix.

Rule checked by tests/test_layout.py: nothing in here imports `easd.pairs`, `easd.lab`, `easd.cli`
or the UI. The engine needs only a loaded `ModelPair` (method/pair.py), however it was made.
"""
