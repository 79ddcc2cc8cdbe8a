"""The Evaluation tab's loading and rendering, without a browser."""

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
