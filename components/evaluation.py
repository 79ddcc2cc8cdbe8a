"""The Evaluation tab: an `eval` output folder (allowed by the operator) or uploaded CSVs, as tables,
figures, any problem's answers side by side, and the problems where two methods differ, each opening both runs'
traces in the Compare tab's lanes (a folder written with `eval --traces`)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd

from easd.errors import EasdError, shown
from easd.lab.reports import figures, report
from easd.lab.runs.evaluate import trace_path
from easd.lab.runs.results_table import load_results
from easd.method.compare import DEFAULT_METHODS, LANES
from easd.method.trace import Trace
from easd.render.figures import empty_figure
from easd.render.html import Html, join, number, tag
from easd.traces import files as trace_io

from .export import site_aside
from .links import folder_name


@dataclass(kw_only=True)
class EvaluationTab:
    """Every component of the tab; its handlers return dicts keyed by these."""

    folder: gr.Dropdown
    uploads: gr.File
    message: gr.HTML
    summary: gr.Dataframe
    paired: gr.Dataframe
    accuracy: gr.Plot
    speed: gr.Plot
    problems: gr.Dataframe
    left_method: gr.Dropdown
    right_method: gr.Dropdown
    left_answer: gr.HTML
    right_answer: gr.HTML
    differences: gr.Dataframe  # where the two chosen methods differ: a row opens both traces in the Compare tab
    make_site: gr.Button  # the open folder as a static site (easd.lab.site), offered as a zip
    site_file: gr.File  # that zip, once made
    results: gr.State  # the loaded results.csv, per session
    traces: gr.State  # the open folder's traces/ (eval --traces), or None: never sent to the browser

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
            self.differences,
            self.results,
            self.traces,
        ]


def build_evaluation_tab(folders: list[str]) -> EvaluationTab:
    gr.Markdown(
        "Open the output of `python -m easd eval` (a folder the operator allowed with `--eval-dir`), or upload its `results.csv` (plus `summary.csv` and `paired.csv` if you have them)."
    )
    with gr.Row():
        # the browser sees a folder's name and a number, never its path
        choices = [(folder_name(folder), str(i)) for i, folder in enumerate(folders)]
        folder = gr.Dropdown(choices, value=None, label="Evaluation folder", interactive=bool(folders), elem_id="eval_folder")
        uploads = gr.File(file_count="multiple", file_types=[".csv"], label="…or upload CSV files", elem_id="eval_upload")
    message = gr.HTML(elem_id="eval_message")
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
    differences = gr.Dataframe(
        label="Where left and right differ: click a row to open both runs in the Compare tab, at their first difference",
        interactive=False,
        elem_id="eval_differences",
    )
    with gr.Row():
        make_site = gr.Button("Make a static site of this folder (.zip)", elem_id="eval_make_site")
    site_file = gr.File(label="A static site: unzip it, open index.html, or push it to a Static Space", visible=False)
    return EvaluationTab(
        folder=folder,
        uploads=uploads,
        message=message,
        summary=summary,
        paired=paired,
        accuracy=accuracy,
        speed=speed,
        problems=problems,
        left_method=left_method,
        right_method=right_method,
        left_answer=left_answer,
        right_answer=right_answer,
        differences=differences,
        make_site=make_site,
        site_file=site_file,
        results=gr.State(None),
        traces=gr.State(None),
    )


# --- loading ------------------------------------------------------------------------------------
# Handlers take the tab and their inputs as a dict keyed by component, and return a dict keyed by
# component; an EasdError they raise is shown in the tab's message line (see components.failures.wire).


def load_folder(tab: EvaluationTab, allowed: list[str], values: dict) -> dict:
    """Open allowed folder number `choice`; anything else the browser sends is refused."""
    if not values[tab.folder]:
        return gr.skip()  # change nothing (an empty dict would be read as one output)
    path = allowed_folder(tab, allowed, values)
    files = {name: path / name for name in ("results.csv", "summary.csv", "paired.csv") if (path / name).exists()}
    return _show(tab, files, f"Opened {path.name}") | {tab.traces: traces_in(path)}


def make_site(tab: EvaluationTab, allowed: list[str], downloads: Path, values: dict) -> dict:
    """The open folder as a static site (its accuracy, the problems whose answers part and both runs of each), zipped
    for download; made in a process of its own (components.export.site_aside). Only an allowed folder: an upload has
    no traces to draw."""
    if not values[tab.folder]:
        raise EasdError("Open an evaluation folder from the list first: a static site is made of a folder and its traces.")
    folder = allowed_folder(tab, allowed, values)
    downloads.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(dir=downloads)) / f"{folder_name(str(folder))}-site.zip"
    try:
        site_aside([folder.resolve()], f"EASD Lab: {folder.name}", out)
    except EasdError as err:  # it names the folder's files by their paths: the browser gets them from the folder's name
        raise EasdError(_one_line(err, [folder.resolve().parent])) from None
    line = f"A static site of {folder.name}: unzip it and open index.html, or publish it (python -m easd site, docs)."
    return {tab.site_file: gr.File(value=str(out), visible=True), tab.message: tag("p", line)}


def allowed_folder(tab: EvaluationTab, allowed: list[str], values: dict) -> Path:
    """The allowed folder the browser chose by its number, where it still holds its results (the operator may have
    moved or deleted it since the app started); one line, naming it as the browser knows it, if not."""
    choice = values[tab.folder]
    if not (isinstance(choice, str) and choice.isdigit() and int(choice) < len(allowed)):
        raise EasdError("That folder is not one this app was allowed to open.")
    folder = Path(allowed[int(choice)])
    if not (folder / "results.csv").is_file():
        raise EasdError(f"{folder_name(folder)} holds no results.csv any more: it was moved or deleted since the app started.")
    return folder


def load_uploads(tab: EvaluationTab, values: dict) -> dict:
    paths = values[tab.uploads]
    if not paths:
        return gr.skip()  # change nothing (an empty dict would be read as one output)
    files = {Path(p).name: Path(p) for p in paths}
    return _show(tab, files, f"Loaded {', '.join(files)}") | {tab.traces: None}


def _show(tab: EvaluationTab, files: dict[str, Path], note: str) -> dict:
    if "results.csv" not in files:
        raise EasdError("results.csv is needed (summary.csv and paired.csv alone cannot show problems).")
    try:
        results = load_results(files["results.csv"])
        summary = pd.read_csv(files["summary.csv"]) if "summary.csv" in files else report.summary_table(results)
        paired = pd.read_csv(files["paired.csv"]) if "paired.csv" in files else report.paired_table(results)
        methods = list(dict.fromkeys(results["method"]))
        shown = {
            tab.summary: summary.round(4),
            tab.paired: paired.round(4),
            tab.accuracy: figures.accuracy_figure(summary),
            tab.speed: figures.speed_figure(summary),
            tab.problems: problem_table(results),
        }
    except (KeyError, ValueError, TypeError, IndexError, pd.errors.ParserError, UnicodeDecodeError, EasdError) as err:
        raise EasdError(f"Could not read those files: {_one_line(err, {path.parent for path in files.values()})}") from None
    if not methods:
        raise EasdError("Could not read those files: results.csv holds no rows.")
    left, right = (
        next((m for m in methods if str(m).split(":")[0].split("@")[0] == DEFAULT_METHODS[lane]), None) for lane in LANES
    )
    left, right = left or methods[0], right or methods[-1]
    message = f"{note}: {results['problem_id'].nunique()} problems, methods {', '.join(map(str, methods))}"
    differences = differences_table(results, left, right)
    return shown | {
        tab.message: tag("p", f"{message}. {differ_line(differences, left, right)}"),
        tab.left_method: gr.Dropdown(methods, value=left),
        tab.right_method: gr.Dropdown(methods, value=right),
        tab.differences: differences,
        tab.results: results,
    }


def traces_in(folder: Path) -> Path | None:
    """An eval folder's traces/ (`eval --traces`), or None when it was written without them."""
    return folder / "traces" if (folder / "traces").is_dir() else None


def _one_line(err: Exception, folders) -> str:
    """The error's first line, with the server's `folders` (absolute paths) left out of the paths it names."""
    line = (str(err).splitlines() or [type(err).__name__])[0] or type(err).__name__
    for folder in folders:
        if folder != Path(folder.anchor):  # the root would take every slash with it
            line = line.replace(str(folder) + "/", "").replace(str(folder), "…")
    return line


def problem_table(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (problem, sample) in the order they ran: the gold answer and each method's prediction,
    ✓ or ✗, with the methods in the order they ran (SD first)."""
    marked = results.assign(answer=[f"{'✓' if ok else '✗'} {p}" for ok, p in zip(results["correct"], results["prediction"])])
    index = ["problem_id", "sample", "gold"]
    table = marked.pivot_table(index=index, columns="method", values="answer", aggfunc="first", sort=False)
    return table[list(results["method"].unique())].reset_index()


# --- answers side by side -----------------------------------------------------------------------


def show_answers(tab: EvaluationTab, values: dict, event: gr.SelectData) -> dict:
    results = values[tab.results]
    if results is None or event is None or event.index is None:
        return gr.skip()  # change nothing (an empty dict would be read as one output)
    row = problem_table(results).iloc[event.index[0]]
    sides = {tab.left_answer: values[tab.left_method], tab.right_answer: values[tab.right_method]}
    return {side: answer_html(results, row["problem_id"], row["sample"], method) for side, method in sides.items()}


def answer_html(results: pd.DataFrame, problem_id: str, sample, method: str) -> Html:
    match = results[(results["problem_id"] == problem_id) & (results["sample"] == sample) & (results["method"] == method)]
    if match.empty:
        return tag("p", f"{method} did not run on problem {problem_id}.")
    row = match.iloc[0]
    verdict = "✓ correct" if row["correct"] else "✗ wrong"
    first = (
        ""
        if pd.isna(row["first_penalty_position"])
        else f", first penalty at token {number(row['first_penalty_position'], '.0f')}"
    )
    counts = f"), {number(row['new_tokens'], '.0f')} tokens, {number(row['penalized'], '.0f')} penalties{first}"
    head = join(
        [
            tag("h4", f"{method}: {verdict}"),
            tag("p", "answer ", tag("code", row["prediction"]), " (gold ", tag("code", row["gold"]), counts),
        ]
    )
    return join([head, tag("pre", row["text"], class_="answer")])


# --- where two methods differ, opened in the Compare tab ----------------------------------------

NO_TRACES = "This folder holds no traces: run `python -m easd eval … --traces` to open its problems in the Compare lanes."


def differences_table(results: pd.DataFrame, left: str, right: str) -> pd.DataFrame:
    """The (problem, sample)s where `left` and `right` answered differently, or one is right and the other wrong
    (those first): each one's verdict and answer, the first character where their texts differ, and each one's first
    penalty (a token position; "" where it made none)."""
    columns = ["problem_id", "sample", "gold", left, right, "texts differ at character"]
    columns += [f"{left}: first penalty", f"{right}: first penalty"]
    if left == right:  # one method against itself: nothing differs, and its columns would collide
        return pd.DataFrame(columns=list(dict.fromkeys(columns)))
    runs = {m: results[results["method"] == m].set_index(["problem_id", "sample"]) for m in (left, right)}
    both = runs[left].index.intersection(runs[right].index, sort=False)
    rows = []
    for key in both:
        a, b = runs[left].loc[key], runs[right].loc[key]
        if a["prediction"] == b["prediction"] and bool(a["correct"]) == bool(b["correct"]):
            continue
        rows.append(
            {
                "problem_id": key[0],
                "sample": key[1],
                "gold": a["gold"],
                left: f"{'✓' if a['correct'] else '✗'} {a['prediction']}",
                right: f"{'✓' if b['correct'] else '✗'} {b['prediction']}",
                "texts differ at character": _first_different_character(str(a["text"]), str(b["text"])),
                f"{left}: first penalty": _position(a),
                f"{right}: first penalty": _position(b),
                "verdicts differ": bool(a["correct"]) != bool(b["correct"]),
            }
        )
    table = pd.DataFrame(rows, columns=[*columns, "verdicts differ"])
    return table.sort_values("verdicts differ", ascending=False, kind="stable")[columns].reset_index(drop=True)


def _first_different_character(a: str, b: str) -> int | str:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return min(len(a), len(b)) if len(a) != len(b) else ""


def _position(row: pd.Series) -> int | str:
    value = row.get("first_penalty_position")
    return "" if value is None or pd.isna(value) else int(value)


def show_differences(tab: EvaluationTab, values: dict) -> dict:
    """The differences again, for the methods now chosen."""
    results = values[tab.results]
    if results is None:
        return gr.skip()  # change nothing (an empty dict would be read as one output)
    left, right = values[tab.left_method], values[tab.right_method]
    differences = differences_table(results, left, right)
    return {tab.differences: differences, tab.message: tag("p", differ_line(differences, left, right))}


def differ_line(differences: pd.DataFrame, left: str, right: str) -> str:
    """How many problems the two methods answered differently, in words."""
    if not len(differences):
        return f"{left} and {right} answered every problem alike."
    return f"{left} and {right} differ on {len(differences)} problem(s): they are listed under the answers."


def chosen_runs(tab: EvaluationTab, values: dict, event: gr.SelectData) -> tuple[dict[str, Trace], tuple] | None:
    """The traces of the difference clicked, by lane, and its (problem, sample); None for a click on nothing."""
    results, folder = values[tab.results], values[tab.traces]
    if results is None or event is None or event.index is None:
        return None
    left, right = values[tab.left_method], values[tab.right_method]
    table = differences_table(results, left, right)
    if not 0 <= event.index[0] < len(table):
        return None
    if folder is None:
        raise EasdError(NO_TRACES)
    row = table.iloc[event.index[0]]
    traces = problem_runs(folder, row["problem_id"], row["sample"], {"left": left, "right": right})
    return traces, (row["problem_id"], row["sample"])


def problem_runs(folder: Path | None, problem, sample, methods: dict[str, str]) -> dict[str, Trace]:
    """The traces of `problem`'s `sample` by each lane's method, from an eval folder's traces/ (`folder`, None when
    there is none); one line naming what is missing."""
    if folder is None:
        raise EasdError(NO_TRACES)
    traces = {}
    for lane, method in methods.items():
        path = trace_path(folder, {"problem_id": problem, "method": method, "sample": sample})
        try:
            inside = path.resolve().parent == folder.resolve() and path.is_file()  # a problem id cannot lead out of traces/
        except (OSError, ValueError):  # a name the file system cannot hold (a NUL, too long)
            inside = False
        if not inside:
            raise EasdError(
                f"This folder's traces/ holds no trace of {shown(str(method))} on problem {shown(str(problem))} (sample {sample}): "
                "check the problem id and the methods, which must be among those the eval ran"
            )
        [traces[lane]] = trace_io.load(path)
    return traces
