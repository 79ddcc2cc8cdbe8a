"""A study or an evaluation on more than one machine: `study --shard I/N` and `study merge`, `eval --shard I/N` and
`eval merge`, and what the two compare.

A shard is a study folder of its own, made by the same command with `--shard I/N`: it decodes the problems whose id
hashes to I (`owner`), so every problem of the plan is in exactly one of the N shards, whatever their order, --offset
or --limit, and on every machine. What the unsharded plan calls "the first --grid-limit problems" stays that plan's:
each shard runs the method's grid on those of them it owns. The timed problems are the exception: shard 1 times all of them,
so that the speed table is one process's, like with like, as one machine's study is; the other shards time none.

Greedy target-only is read from SD's texts where SD's equal the target's on the timed problems (easd.lab.study). A
shard that timed nothing cannot tell, so it leaves target-only to the merge, which reads the timings from shard 1; if
they differ, one line says to run target-only on every problem (`--target-runs all --resume` on each shard).

`study merge` checks that the shards are those of one study (`check_shards`: each of 1..N once, one pair, one data
file and model files by their hashes, one set of settings, grader and versions), accounts for every row of each against
the plan (`accounted`: each row one the plan runs on that shard, once, and every one it runs there, with its trace), and
writes one folder as one machine would have: results.csv, traces/, speed/, a run.json of the whole plan, and its
report. It reads the shards as a user's files (easd.files.read_bytes: never a pipe or a device, never a copy) and
changes nothing in them.

An evaluation's shard (`eval --shard I/N`) is the same idea without a grid or timed problems: its run.json's `plan`
holds what `study` holds for a study (its methods, its own problems and the whole plan's), and `eval merge` accounts
for every row as `study merge` does: each of the plan's methods on each of the shard's problems, each sample once, with
its trace where the shard kept traces.

Its rooms: `split` (which shard runs a problem, and a shard's plan), `recorded` (what a shard records of its data and
models), `folder` (a shard's folder read, and the shards checked as one plan's), `accounting` (every row of a shard
against the plan) and `merge` (the folder written as one machine's).
"""
