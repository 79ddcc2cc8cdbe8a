"""Problems read from their files and answers graded. Imports no other room.

problems.py      the formats, loading a problems file bounded and checked, the prompt styles
answers.py       an answer extracted from a model's text and graded (math-verify's equivalence, GSM8K's numbers,
                 every one of several answers, an option's letter)
qwen25_math.py   the Qwen2.5-Math harness's rules written again, the second grader
forked.py        each check in a process that can be stopped
"""
