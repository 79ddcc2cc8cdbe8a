"""The evaluation lab, in rooms, each importing only the rooms above it in this list:

    grading/      problems and their graders
    runs/         evaluations: rows, folders, Ray, lm-eval's model, the sampling protocol
    reports/      tables, figures and statistics of a run's rows
    speed/        bench and Spec-Bench: tokens/s against references
    acceptance/   where SD accepts, task by task; τ_H calibrated
    study/        does a method help over SD: plan, findings, power, where, report
    shards/       a study or an evaluation in shards: split, recorded, checked, accounted, merged (reads study/)
    site.py       folders published as one static site (reads study/)

Builds on `easd.method` and `easd.pairs`; never imports the CLI or the UI (tests/test_layout.py checks both).
"""
