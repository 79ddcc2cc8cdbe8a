"""Model pairs: loading folders, .gguf files and hub ids, the embedded GGUF pair, the tiny pair, the named registry.

Imports `easd.method` (for `ModelPair`), never `easd.lab`, the CLI or the UI.
"""
