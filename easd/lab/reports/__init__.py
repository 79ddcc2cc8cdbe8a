"""A run's rows as tables and figures (`report`: summary, paired, the paper's table) and their statistics (`stats`:
Wilson, McNemar, bootstrap, power, spreads). Imports `grading` and `runs`.
"""
