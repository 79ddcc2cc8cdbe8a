"""Our grader beside the Qwen2.5-Math evaluation's, which RSD's harness and the paper's benchmarks grade with.

    python scripts/compare_graders.py --harness QWEN25_MATH/evaluation --harness-python VENV/bin/python \
        --data FILE --name aime24 [--results EVAL_FOLDER/results.csv ...]

The harness's grader needs its own requirements (sympy 1.12, antlr4 4.11.1 and its vendored latex2sympy2), which
torch's sympy conflicts with, so it runs in their own Python (`--harness-python`) as a child process that reads the
data file itself, with the harness's `parse_ground_truth`, `extract_answer` and `math_equal` (`--name` is the
harness's data name: gsm8k, math, minerva_math, olympiadbench, aime24, amc23, …). Nothing of the harness is copied
here; clone it (github.com/QwenLM/Qwen2.5-Math) and make the venv:

    python -m venv VENV && VENV/bin/pip install sympy==1.12 antlr4-python3-runtime==4.11.1 word2number regex

Three kinds of answer are graded by both, each against its grader's own reading of the data's gold:
  gold      the data's gold answer written as a model would, "The answer is \\boxed{GOLD}."
  solution  the data's worked solution, where it has one: its last \\boxed{} (or, for GSM8K, its "#### N")
  model     each text of the eval folders' results.csv (their problems must come from the same --data)
`--grader qwen25-math` compares our rewrite of the harness's rules (easd.lab.grading.qwen25_math) instead of our own grader.
It prints each kind's agreement and every disagreement: the two extracted answers, the two verdicts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from easd.lab.grading.answers import GRADERS, extract_answer, is_correct
from easd.lab.grading.problems import load_problems, read_records
from easd.lab.runs.results_table import load_results

HARNESS = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/latex2sympy"]
from grader import math_equal
from parser import extract_answer, parse_ground_truth
job = json.load(sys.stdin)
records = [json.loads(line) for line in open(job["data"], encoding="utf-8") if line.strip()]
out = []
for index, text in job["items"]:
    gold = parse_ground_truth(records[index], job["name"])[1]
    answer = extract_answer(text, job["name"])
    out.append([answer, str(gold), bool(math_equal(answer, gold, timeout=True))])
json.dump(out, sys.stdout)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", type=Path, required=True, help="the harness's evaluation folder (grader.py, parser.py)")
    parser.add_argument("--harness-python", type=Path, required=True, help="a Python with the harness's requirements")
    parser.add_argument("--data", type=Path, required=True, help="a JSONL file of problems both graders can read")
    parser.add_argument("--name", required=True, help="the harness's data name for it (gsm8k, minerva_math, aime24, …)")
    parser.add_argument("--format", default="auto", help="our format for it (default: detected)")
    parser.add_argument("--results", type=Path, nargs="*", default=[], help="results.csv files of eval runs on --data")
    parser.add_argument("--limit", type=int, help="grade the gold and solution answers of the first N problems only")
    parser.add_argument("--grader", default="math-verify", choices=GRADERS, help="which of our graders to compare")
    args = parser.parse_args(argv)
    if not (args.harness / "grader.py").is_file():
        parser.error(f"--harness: {args.harness} holds no grader.py; give the Qwen2.5-Math repository's evaluation folder")
    problems = load_problems(args.data, args.format)  # in file order: problem i is the data's i-th record
    records = [row for _, row in read_records(args.data)]
    where = {problem.id: i for i, problem in enumerate(problems)}
    kinds: dict[str, list[tuple[int, str, str]]] = {"gold": [], "solution": [], "model": []}  # (index, label, text)
    for i, (problem, row) in enumerate(zip(problems[: args.limit], records)):
        kinds["gold"].append((i, problem.id, f"The answer is \\boxed{{{problem.gold}}}."))
        solution = row.get("solution") or (row.get("answer") if "####" in str(row.get("answer")) else None)
        if isinstance(solution, str):
            kinds["solution"].append((i, problem.id, solution.replace("####", "The answer is")))
    for path in args.results:
        for _, result in load_results(path).iterrows():
            if result["problem_id"] not in where:
                parser.error(f"--results: {path} holds problem {result['problem_id']!r}, which --data does not")
            kinds["model"].append((where[result["problem_id"]], f"{result['problem_id']} {result['method']}", result["text"]))
    for kind, items in kinds.items():
        if items:
            report(kind, items, problems, args)
    return 0


def report(kind: str, items: list[tuple[int, str, str]], problems, args) -> None:
    job = {"data": str(args.data.resolve()), "name": args.name, "items": [(i, text) for i, _, text in items]}
    done = subprocess.run(
        [str(args.harness_python), "-c", HARNESS, str(args.harness.resolve())],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"the harness's grader failed:\n{done.stderr[-2000:]}")
    theirs = json.loads(done.stdout)
    ours = []
    for i, _, text in items:
        answer = extract_answer(text)[0]
        ours.append((answer, is_correct(answer, problems[i].gold, problems[i].format, args.grader)))
    agree = sum(o[1] == t[2] for o, t in zip(ours, theirs))
    print(
        f"\n{kind}: {len(items)} answers; both right {sum(o[1] and t[2] for o, t in zip(ours, theirs))}, "
        f"both wrong {sum(not o[1] and not t[2] for o, t in zip(ours, theirs))}, agree {agree} ({agree / len(items):.1%})"
    )
    for (i, label, _), (answer, right), (their_answer, their_gold, their_right) in zip(items, ours, theirs):
        if right != their_right:
            print(
                f"  {label}: ours {'right' if right else 'wrong'} ({answer!r} vs gold {problems[i].gold!r}); "
                f"harness {'right' if their_right else 'wrong'} ({their_answer!r} vs gold {their_gold!r})"
            )


if __name__ == "__main__":
    sys.exit(main())
