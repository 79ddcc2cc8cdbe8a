"""Decoding problems into rows: an evaluation (`evaluate`), on a Ray cluster (`cluster`), as lm-eval's model
(`harness`), its folder and rows (`results_table`), its sampling protocol (`protocol`), a rerun that checks it
(`reproduce`). Imports `grading` only.
"""
