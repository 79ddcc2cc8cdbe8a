"""`python -m easd study`: does a method (EASD by default, `--method`) help over SD on this pair and these problems, at
what speed, how robust is that, and how many problems would it take to tell?

One folder answers what the paper's reviewers asked, from runs made for it (docs/evaluation.md, "study"). "The
method" below is the one the study compares with SD; its table entry (easd.method.methods) says everything the
study reads of it: its grid, its interventions, whether it resumes SD's run.

    results.csv, traces/   SD and the method on every problem, and the method over its grid (EASD's τ_H × τ_O) on
                           the first --grid-limit of them (a method that follows SD resumes SD's run at its first
                           intervention, easd.method.prefix): the eval folder the app's Evaluation tab and links open
    speed/results.csv      target-only, SD and the method on the first --speed-limit problems, one row at a time,
                           problem by problem, so their tokens/s compare like with like on this machine
    study.json             every figure of the report, for scripts
    study.md               the report's tables as markdown (docs/ quotes them)
    study.html             the report as one file that opens offline (easd.render.study)
    differences/           the problems where SD and the method answer differently, each as the one-file export
                           (easd.render.export) opened at the token where the two runs part

Target-only's accuracy: in greedy decoding, SD's text *is* the target's (tests/test_decoding.py proves it for
every k), so the target is run only on the timed problems, its texts compared with SD's there, and SD's rows read
as the target's elsewhere when every one was equal (`--target-runs all` runs it on every problem instead; sampled
runs always do). Each phase appends rows as problems finish, so a stopped study resumes with `--resume`.

Its rooms: `plan` (the plan, its run and its folder), `findings` (the figures and the verdict), `power` (how many
problems it would take), `where` (where the method intervenes, where the answers part), `report` (the files).
"""
