"""The Evaluation tab: an `eval` output folder (allowed by the operator) or uploaded CSVs, as tables,
figures, and any problem's answers side by side."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd

from easd.errors import EasdError
from easd.lab import report
from easd.lab.results import load_results

from .figures import empty_figure


@dataclass
class EvaluationTab:
    folder: gr.Dropdown
    uploads: gr.File
    message: gr.Markdown
    summary: gr.Dataframe
    paired: gr.Dataframe
    accuracy: gr.Plot
    speed: gr.Plot
    problems: gr.Dataframe
    left_method: gr.Dropdown
    right_method: gr.Dropdown
    left_answer: gr.HTML
    right_answer: gr.HTML
    results: gr.State  # the loaded results.csv, per session

    def outputs(self) -> list:
        return [
            self.message,
            self.summary,
            self.paired,
            self.accuracy,
            self.speed,
            self.problems,
            self.left_method,
            self.right_method,
            self.results,
        ]


def build_evaluation_tab(folders: list[str]) -> EvaluationTab:
    gr.Markdown(
        "Open the output of `python -m easd eval` (a folder the operator allowed with `--eval-dir`), or upload its `results.csv` (plus `summary.csv` and `paired.csv` if you have them)."
    )
    with gr.Row():
        # the browser sees a folder's name and a number, never its path
        choices = [(Path(folder).name or folder, str(i)) for i, folder in enumerate(folders)]
        folder = gr.Dropdown(choices, value=None, label="Evaluation folder", interactive=bool(folders), elem_id="eval_folder")
        uploads = gr.File(file_count="multiple", file_types=[".csv"], label="…or upload CSV files", elem_id="eval_upload")
    message = gr.Markdown(elem_id="eval_message")
    summary = gr.Dataframe(
        label="summary.csv: accuracy with 95% Wilson intervals, speed, interventions", interactive=False, elem_id="eval_summary"
    )
    paired = gr.Dataframe(
        label="paired.csv: EASD vs SD and vs target on the same problems (exact McNemar, bootstrap 95% CI)",
        interactive=False,
        elem_id="eval_paired",
    )
    with gr.Row():
        accuracy = gr.Plot(empty_figure(), show_label=False)
        speed = gr.Plot(empty_figure(), show_label=False)
    problems = gr.Dataframe(label="Problems: click a row to read the answers", interactive=False, elem_id="eval_problems")
    with gr.Row():
        left_method = gr.Dropdown([], label="left", elem_id="eval_left")
        right_method = gr.Dropdown([], label="right", elem_id="eval_right")
    with gr.Row():
        left_answer = gr.HTML(elem_id="eval_left_answer")
        right_answer = gr.HTML(elem_id="eval_right_answer")
    return EvaluationTab(
        folder,
        uploads,
        message,
        summary,
        paired,
        accuracy,
        speed,
        problems,
        left_method,
        right_method,
        left_answer,
        right_answer,
        gr.State(None),
    )


# --- loading ------------------------------------------------------------------------------------


def load_folder(choice: str | None, allowed: list[str]) -> list:
    """Open allowed folder number `choice`; anything else the browser sends is refused."""
    if not choice:
        return [gr.skip()] * 9
    if not (choice.isdigit() and int(choice) < len(allowed)):
        return _message("⚠️ That folder is not one this app was allowed to open.")
    path = Path(allowed[int(choice)])
    files = {name: path / name for name in ("results.csv", "summary.csv", "paired.csv") if (path / name).exists()}
    return _show(files, f"Opened {html.escape(path.name)}")


def load_uploads(paths: list[str] | None) -> list:
    if not paths:
        return [gr.skip()] * 9
    files = {Path(p).name: Path(p) for p in paths}
    return _show(files, f"Loaded {', '.join(html.escape(name) for name in files)}")


def _show(files: dict[str, Path], note: str) -> list:
    if "results.csv" not in files:
        return _message("⚠️ results.csv is needed (summary.csv and paired.csv alone cannot show problems).")
    try:
        results = load_results(files["results.csv"])
        summary = pd.read_csv(files["summary.csv"]) if "summary.csv" in files else report.summary_table(results)
        paired = pd.read_csv(files["paired.csv"]) if "paired.csv" in files else report.paired_table(results)
    except (KeyError, ValueError, pd.errors.ParserError, UnicodeDecodeError, EasdError) as err:
        return _message(
            f"⚠️ Could not read those files: {html.escape(str(err).splitlines()[0] if str(err) else type(err).__name__)}"
        )
    methods = list(dict.fromkeys(results["method"]))
    left = "sd" if "sd" in methods else methods[0]
    right = next((m for m in methods if m.startswith("easd")), methods[-1])
    return [
        f"{note}: {results['problem_id'].nunique()} problems, methods {', '.join(methods)}",
        summary.round(4),
        paired.round(4),
        report.accuracy_figure(summary),
        report.speed_figure(summary),
        problem_table(results),
        gr.Dropdown(methods, value=left),
        gr.Dropdown(methods, value=right),
        results,
    ]


def _message(text: str) -> list:
    return [text] + [gr.skip()] * 8


def problem_table(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (problem, sample) in the order they ran: the gold answer and each method's prediction,
    ✓ or ✗, with the methods in the order they ran (SD first)."""
    marked = results.assign(answer=[f"{'✓' if ok else '✗'} {p}" for ok, p in zip(results["correct"], results["prediction"])])
    index = ["problem_id", "sample", "gold"]
    table = marked.pivot_table(index=index, columns="method", values="answer", aggfunc="first", sort=False)
    return table[list(results["method"].unique())].reset_index()


# --- answers side by side -----------------------------------------------------------------------


def show_answers(results: pd.DataFrame | None, left: str, right: str, event: gr.SelectData) -> list:
    if results is None or event is None or event.index is None:
        return [gr.skip(), gr.skip()]
    table = problem_table(results)
    row = table.iloc[event.index[0]]
    return [answer_html(results, row["problem_id"], row["sample"], method) for method in (left, right)]


def answer_html(results: pd.DataFrame, problem_id: str, sample, method: str) -> str:
    match = results[(results["problem_id"] == problem_id) & (results["sample"] == sample) & (results["method"] == method)]
    if match.empty:
        return f"<p>{html.escape(method)} did not run on problem {html.escape(str(problem_id))}.</p>"
    row = match.iloc[0]
    verdict = "✓ correct" if row["correct"] else "✗ wrong"
    first = "" if pd.isna(row["first_penalty_position"]) else f", first penalty at token {int(row['first_penalty_position'])}"
    head = (
        f"<h4>{html.escape(method)}: {verdict}</h4><p>answer <code>{html.escape(row['prediction'])}</code> "
        f"(gold <code>{html.escape(row['gold'])}</code>), {int(row['new_tokens'])} tokens, {int(row['penalized'])} penalties{first}</p>"
    )
    return f'{head}<pre class="answer">{html.escape(row["text"])}</pre>'
