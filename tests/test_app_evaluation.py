"""The Evaluation tab's loading and rendering, without a browser."""

import html

import pandas as pd

from easd.lab.results import load_results
from ui import evaluation


def test_only_allowed_folders_open(eval_folder, tmp_path):
    for forged in (str(tmp_path), "1", "-1", "../etc"):
        assert evaluation.load_folder(forged, [str(eval_folder)])[0].startswith("⚠️ That folder is not one")
    shown = evaluation.load_folder("0", [str(eval_folder)])
    assert shown[0].startswith("Opened") and isinstance(shown[1], pd.DataFrame) and list(shown[1]["method"]) == ["sd", "easd"]


def test_uploads_need_results_and_bad_files_get_a_message(eval_folder, tmp_path):
    assert "results.csv is needed" in evaluation.load_uploads([str(eval_folder / "summary.csv")])[0]
    (tmp_path / "results.csv").write_text("not,our,columns\n1,2,3\n")
    assert evaluation.load_uploads([str(tmp_path / "results.csv")])[0].startswith("⚠️ Could not read")
    shown = evaluation.load_uploads([str(eval_folder / "results.csv")])  # summary and paired are computed when absent
    assert "mcnemar_p" in shown[2].columns


def test_answers_side_by_side_are_escaped(eval_folder):
    results = load_results(eval_folder / "results.csv")
    results.loc[0, "text"] = "<script>alert(1)</script>"
    table = evaluation.problem_table(results)
    assert list(table.columns[:3]) == ["problem_id", "sample", "gold"] and len(table) == 3
    html = evaluation.answer_html(results, results.loc[0, "problem_id"], results.loc[0, "sample"], results.loc[0, "method"])
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_header_only_or_nan_results_get_one_line(eval_folder, tmp_path):
    lines = (eval_folder / "results.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "results.csv").write_text(lines[0], encoding="utf-8")
    message = evaluation.load_uploads([str(tmp_path / "results.csv")])[0]
    assert message == "⚠️ Could not read those files: results.csv: holds no results yet, only its header"
    results = pd.read_csv(eval_folder / "results.csv", dtype=str, keep_default_na=False)
    results.loc[1, "new_tokens"] = "nan"
    results.to_csv(tmp_path / "results.csv", index=False)
    message = evaluation.load_uploads([str(tmp_path / "results.csv")])[0]
    assert html.unescape(message) == "⚠️ Could not read those files: results.csv: row 3, column new_tokens: 'nan' is not a number"
