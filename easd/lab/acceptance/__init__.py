"""Where the models are uncertain: where SD accepts, task by task (`dynamics`, the `acceptance` command), and τ_H
calibrated from the models' own entropies (`calibrate`). Imports the rooms below it (`speed` for Spec-Bench's questions).
"""
