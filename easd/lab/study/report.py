"""The report's files, from `analyse`'s figures: study.json, study.md, study.html and differences/ (`write_report`)."""

from __future__ import annotations

import json
from pathlib import Path

from ...files import file_stem, write_text_whole
from ...method.references import REFERENCE
from ...traces import files as trace_io
from ..runs.evaluate import trace_path
from .plan import counted


def write_differences(out: Path, found: list[dict], name: str) -> None:
    """The one-file export of SD (left) against the method (right) for every problem in `found` that names a file
    (only its two traces are read)."""
    from ...render.export import comparison_file

    folder = out / "differences"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.html"):  # an earlier report's: its problems may part no more
        old.unlink()
    for difference in found:
        problem = difference["problem_id"]
        paths = [trace_path(out / "traces", {"problem_id": problem, "method": m, "sample": 0}) for m in (REFERENCE, name)]
        if difference["file"] and all(path.exists() for path in paths):
            left, right = (trace_io.read_json(path, capped=False)[0] for path in paths)
            page = comparison_file({"left": left, "right": right})
            write_text_whole(folder / f"{file_stem(problem)}.html", page)


def write_report(out: Path, study: dict) -> None:
    """study.json, study.md, study.html and differences/, from `analyse`'s figures."""
    from ...files import write_text_whole
    from ...render.study import study_file

    write_differences(out, study["differences"], study["method"]["name"])
    write_text_whole(out / "study.json", json.dumps(study, indent=1, ensure_ascii=False, default=_plain))
    write_text_whole(out / "study.md", markdown(study))
    write_text_whole(out / "study.html", study_file(study), errors="replace")


def _plain(value):
    return value.item() if hasattr(value, "item") else str(value)


def markdown(study: dict) -> str:
    """The report's tables as markdown."""
    from ...render.study import ranged

    config, method = study["config"], study["method"]
    title = method["title"]
    lines = [f"# Does {title} help? {config['pair']} on {Path(config['data']).name}", "", study["verdict"], ""]
    lines += ["## Accuracy", "", "| method | problems | correct | accuracy (95% Wilson) | from |", "|---|---:|---:|---|---|"]
    for row in study["accuracy"]:
        low, high = row["ci95"]
        label = method["label"] if row["method"] == method["name"] else row["method"]
        lines.append(
            f"| {label} | {row['problems']} | {row['correct']} | {100 * row['accuracy']:.1f}% ({100 * low:.1f}–{100 * high:.1f}) | {row['source']} |"
        )
    p, target = study["paired"], study["target"]
    lines += [
        "",
        f"{title}'s text differs from SD's on {p.get('texts_differ', 0)} problems, its answer on {p.get('answers_differ', 0)}. "
        f"Target-only: {target['why']}.",
        "",
        "## How many problems would it take?",
        "",
        *study["power_lines"],
        "",
        "## Speed",
        "",
        study["speed_note"] + " Acceptance over every problem.",
        "",
        "| method | problems timed | tokens | tokens/s | speed-up over target-only | mean acceptance length | draft acceptance rate "
        f"| {method['intervention'][1] or 'interventions'} / 1k tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in study["speed"]:
        cells = [
            row["method"],
            str(row["problems"]),
            f"{row['tokens']:,}",
            ranged(row["tokens_per_s"], row["tokens_per_s_range"], "{:.2f}"),
            ranged(row["speedup"], row["speedup_range"], "{:.2f}×"),
            _figure(row["mean_acceptance_length"], "{:.2f}"),
            _figure(row["draft_acceptance_rate"], "{:.3f}"),
            _figure(row["interventions_per_1k"], "{:.1f}"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *grid_markdown(study), *interventions_markdown(study)]
    lines += [f"## Where SD and {title} answer differently", ""]
    if study["differences"]:
        lines += [f"| problem | gold | SD | {title} | parts at token |", "|---|---|---|---|---:|"]
        for d in study["differences"]:
            mark = lambda ok: "✓" if ok else "✗"  # noqa: E731
            lines.append(
                f"| {_code(d['problem_id'])} | {_code(d['gold'])} | {_code(d['left'])} {mark(d['left_correct'])} | "
                f"{_code(d['right'])} {mark(d['right_correct'])} | {d['token'] if d['token'] is not None else '—'} |"
            )
    else:
        lines.append("None.")
    lines += ["", "## Graders", "", *graders_markdown(study["graders"])]
    lines += ["", "## What was assumed", ""] + [f"- {line}" for line in study["assumptions"]]
    return "\n".join(lines) + "\n"


def grid_markdown(study: dict) -> list[str]:
    """The grid's cells as a table: over two settings, a row per value of the first; over one, a row."""
    grid, title = study["grid"], study["method"]["title"]
    if not grid["settings"]:
        return ["## Sensitivity", "", f"{title} declares no grid: no setting was varied.", ""]
    many = study["method"]["intervention"][1]  # "" for a method that never intervenes: its cells give accuracy alone
    cell = lambda key: _cell(grid["cells"][key], many)  # noqa: E731
    lines = [f"## Sensitivity: accuracy{f' ({many} per 1,000 tokens)' if many else ''} on {grid['problems']} problems", ""]
    if len(grid["settings"]) == 2:
        (first, second), (rows, across) = grid["labels"], grid["values"].values()
        lines += [f"| {first} \\ {second} | " + " | ".join(f"{o:g}" for o in across) + " |", "|---|" + "---:|" * len(across)]
        lines += [f"| {h:g} | " + " | ".join(cell(f"{h:g}/{o:g}") for o in across) + " |" for h in rows]
    else:
        (label,), (values,) = grid["labels"], grid["values"].values()
        lines += [f"| {label} | " + " | ".join(f"{v:g}" for v in values) + " |", "|---|" + "---:|" * len(values)]
        lines.append("| accuracy | " + " | ".join(cell(f"{v:g}") for v in values) + " |")
    return [*lines, "", f"SD on the same problems: {_figure(grid['sd_accuracy'], '{:.0%}')}.", ""]


def interventions_markdown(study: dict) -> list[str]:
    """Where the method intervenes: by tenth of the answer, by the kind of token, the most frequent pairs."""
    method, found = study["method"], study["interventions"]
    title, many = method["title"], method["intervention"][1]
    if found is None:
        return [f"## Where {title} intervenes", "", f"{title} declares no interventions: every token is its own choice.", ""]
    lines = [f"## Where {title} intervenes", "", f"{found['count']} {many} in {title}'s runs.", ""]
    tenths = len(found["by_tenth"])
    lines += ["| tenth of the answer | " + " | ".join(str(i + 1) for i in range(tenths)) + " |", "|---|" + "---:|" * tenths]
    lines += [f"| {many} | " + " | ".join(str(n) for n in found["by_tenth"]) + " |", ""]
    lines += [f"| {found['kind_of']} | " + " | ".join(found["by_kind"]) + " |", "|---|" + "---:|" * len(found["by_kind"])]
    lines += [f"| {many} | " + " | ".join(str(n) for n in found["by_kind"].values()) + " |", ""]
    if found["pairs"]:
        lines += ["| set aside | chosen | times |", "|---|---|---:|"]
        lines += [
            f"| {'—' if a['set_aside'] is None else '`' + _code(a['set_aside']) + '`'} | `{_code(a['chosen'])}` | {a['count']} |"
            for a in found["pairs"]
        ]
        lines.append("")
    return lines


def graders_markdown(compared: dict) -> list[str]:
    """Each method's accuracy by the study's grader and by the other, and the answers where the two part."""
    grader, other = compared["grader"], compared["other"]
    lines = [f"| method | {grader} (the study's) | {other} |", "|---|---:|---:|"]
    lines += [f"| {m} | {100 * a:.1f}% | {100 * b:.1f}% |" for m, (a, b) in compared["accuracy"].items()]
    lines += [
        "",
        f"The two graders part on {counted(len(compared['disagree']), 'answer')}" + (":" if compared["disagree"] else "."),
    ]
    if compared["disagree"]:
        lines += ["", f"| problem | method | answer | gold | {grader} | {other} |", "|---|---|---|---|---|---|"]
        for row in compared["disagree"]:
            ours, theirs = ("right", "wrong") if row["correct"] else ("wrong", "right")
            lines.append(
                f"| {_code(str(row['problem_id']))} | {row['method']} | {_code(row['prediction'])} | {_code(row['gold'])} | {ours} | {theirs} |"
            )
    return lines


def _figure(value, form: str) -> str:
    return "—" if value is None else form.format(value)


def _cell(cell: dict, interventions: str) -> str:
    """A grid point's accuracy, and its interventions per 1,000 tokens where the method has any (`interventions`: their
    name, "" for none)."""
    if cell["accuracy"] is None:
        return "—"
    rate = f" ({_figure(cell['interventions_per_1k'], '{:.1f}')})" if interventions else ""
    return f"{100 * cell['accuracy']:.0f}%{rate}"


def _code(text: str) -> str:
    """Model output in a markdown table cell: visible whitespace, no pipe or backtick that breaks the table."""
    return text.replace("\n", "↵").replace("|", "\\|").replace("`", "ˋ")
