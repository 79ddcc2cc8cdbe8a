"""Where the method intervenes (by tenth of the answer, by the kind of token, the most frequent pairs) and where its
answers part from SD's (each with a link to the token where the two runs part)."""

from __future__ import annotations

import unicodedata
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import pandas as pd

from ...files import file_stem
from ...method.compare import first_difference
from ...method.methods import Method
from ...method.references import REFERENCE
from ...traces import files as trace_io
from ..acceptance.calibrate import nearest_candidate, top_share_mean
from ..runs.evaluate import trace_path

POSITION_BINS = 10  # where in the answer an intervention falls: tenths of the run's tokens


TOP_PAIRS = 15  # set aside → chosen pairs listed


TOKEN_KINDS = ("digit", "operator", "word start", "word piece", "punctuation", "whitespace", "other")


OPERATORS = set("+-*/=×÷^<>%±·√")


def token_kind(text: str) -> str:
    """What kind of token an intervention set aside (EASD's refused draft): a digit, an operator, the start of a word
    (a space, then letters), a piece of a word (letters with no space), punctuation, whitespace, or other."""
    bare = text.strip()
    if not bare:
        return "whitespace"
    if bare[0].isdigit():
        return "digit"
    if all(c in OPERATORS for c in bare):
        return "operator"
    if all(unicodedata.category(c).startswith("P") for c in bare):
        return "punctuation"
    if bare[0].isalpha():
        return "word start" if text[0].isspace() else "word piece"
    return "other"


def traces_of(out: Path, results: pd.DataFrame, method: str) -> dict[str, object]:
    """problem id → the trace of `method`'s run (sample 0), from the folder's traces/."""
    found = {}
    for _, row in results[(results["method"] == method) & (results["sample"] == 0)].iterrows():
        path = trace_path(out / "traces", row)
        if path.exists():
            found[row["problem_id"]] = trace_io.read_json(path, capped=False)[0]
    return found


def where_it_intervenes(traces: dict, method: Method) -> dict:
    """The method's interventions (the tokens whose origin its table entry names as its own: EASD's penalties) by
    where they fall in the answer (tenths of its tokens), by the kind of token they set aside (the draft's, where a
    record names one: EASD's refused draft; else the token written instead), and the most frequent set aside →
    chosen pairs (set aside: None where the record names none)."""
    positions, kinds, pairs, total, set_aside = [0] * POSITION_BINS, Counter(), Counter(), 0, 0
    for trace in traces.values():
        length = len(trace.records)
        for record in trace.records:
            if not method.intervened(record.origin):
                continue
            total += 1
            aside = record.draft_token_text if record.draft_token_id is not None else None
            set_aside += aside is not None
            positions[min(POSITION_BINS - 1, POSITION_BINS * record.position // max(1, length))] += 1
            kinds[token_kind(record.token_text if aside is None else aside)] += 1
            pairs[(aside, record.token_text)] += 1
    return {
        "count": total,
        "set_aside": set_aside,  # of them, those whose record names the token set aside
        "kind_of": kind_of(total, set_aside),
        "by_tenth": positions,
        "by_kind": {kind: kinds[kind] for kind in TOKEN_KINDS},
        "pairs": [{"set_aside": a, "chosen": b, "count": n} for (a, b), n in pairs.most_common(TOP_PAIRS)],
    }


def kind_of(count: int, set_aside: int) -> str:
    """What `where_it_intervenes` sorted by kind: the tokens set aside, the tokens written instead, or both."""
    if set_aside == count:
        return "kind of token set aside"
    return "kind of token written" if not set_aside else "kind of token set aside (else written)"


def differences(out: Path, results: pd.DataFrame, runs: dict[str, dict], app_url: str, name: str) -> list[dict]:
    """Each problem where SD (left) and the method (right) answer differently: both answers, the gold one, the token
    where the runs part, a link that opens the two runs there in the app (`python app.py --eval-dir FOLDER`), and the
    one-file export."""
    rows = results[results["sample"] == 0]
    answers = {m: rows[rows["method"] == m].set_index("problem_id") for m in (REFERENCE, name)}
    found = []
    for problem in answers[name].index.intersection(answers[REFERENCE].index):
        a, b = answers[REFERENCE].loc[problem], answers[name].loc[problem]
        if str(a["prediction"]) == str(b["prediction"]):
            continue
        token = first_difference(runs[REFERENCE].get(problem), runs[name].get(problem))
        query = {"eval": out.resolve().name, "problem": problem, "sample": 0, "left": REFERENCE, "right": name, "lane": "right"}
        found.append(
            {
                "problem_id": str(problem),
                "gold": str(a["gold"]),
                "left": str(a["prediction"]),
                "left_correct": bool(a["correct"]),
                "right": str(b["prediction"]),
                "right_correct": bool(b["correct"]),
                "token": token,
                "app_link": app_url + "?" + urlencode(query | ({"token": token} if token is not None else {})),
                # a file of its own (5 MB, Plotly inlined) only where one method was right and the other wrong
                "file": f"differences/{file_stem(str(problem))}.html" + (f"#right-{token}" if token is not None else "")
                if bool(a["correct"]) != bool(b["correct"])
                else None,
            }
        )
    return sorted(found, key=lambda d: (d["left_correct"] == d["right_correct"], d["problem_id"]))  # verdicts that part first


def after_the_fact(traces: dict) -> dict:
    """The τ_H the paper's calibration would pick from these problems' own greedy SD runs (the target's entropy at
    every token): informative only, since it is read off the test problems after the fact."""
    entropies = [r.h_target for trace in traces.values() for r in trace.records if r.h_target is not None]
    if not entropies:
        return {}
    raw = top_share_mean(entropies)
    return {"tokens": len(entropies), "raw": raw, "tau_h": nearest_candidate(raw)}
