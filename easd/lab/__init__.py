"""The evaluation lab: problems and grading, evaluation runs, results files, reports, statistics, calibration, benchmarks.

Builds on `easd.method` and `easd.pairs`; never imports the CLI or the UI.
"""
