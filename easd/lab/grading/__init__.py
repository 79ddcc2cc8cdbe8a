"""Problems read from their files and answers graded: the formats, the prompt styles, the graders (math-verify, the
Qwen2.5-Math harness's rules written again), each check in a process that can be stopped. Imports no other room.
"""
