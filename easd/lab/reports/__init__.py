"""A run's rows as tables and figures, and their statistics. Imports `grading` and `runs`.

report.py    results.csv → summary.csv, paired.csv, paper.md and report.html; the sweep's tables
paper.py     the paper's main table, over one benchmark or several
figures.py   an evaluation's figures, and one self-contained page that holds them
stats.py     Wilson, McNemar, bootstrap, power, spreads
"""
