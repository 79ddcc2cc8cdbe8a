"""Hostile trace files: a real trace with XSS payloads written into one field (CSV column or JSON key).

Shared by tests/test_ui_hostile.py (every field, rendered in Python) and tests/test_app_browser.py
(groups of fields, in a real browser).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from test_app_render import NASTY

PAYLOADS = NASTY + [
    '" onmouseover="window.__xss=4" x="',
    "' onmouseover='window.__xss=5' x='",
    '<input autofocus onfocus="window.__xss=6">',
    "javascript:window.__xss=7",
    '<svg onload="window.__xss=8">',
    '</code></div><img src=x onerror="window.__xss=9">',
    'o-bonus" onclick="window.__xss=10',
    "[x](javascript:window.__xss=11)",
]


def csv_fields(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


def json_fields(path: Path) -> list[str]:
    """Dotted paths: run keys, settings.*, stats.*, summary.*, rows[].*, blocks[].*."""
    run = json.loads(path.read_text())["runs"][0]
    fields = [key for key in run if key not in ("settings", "stats", "summary", "rows", "blocks")]
    for group in ("settings", "stats", "summary"):
        fields += [f"{group}.{key}" for key in run[group]]
    fields += [f"rows[].{key}" for key in run["rows"][0]]
    fields += [f"blocks[].{key}" for key in run["blocks"][0]] + ["blocks[].drafted[].text"]
    return fields


def hostile_csv(source: Path, columns: list[str], target: Path) -> Path:
    """`source` with every cell of `columns` replaced by payloads, row after row."""
    with open(source, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for i, row in enumerate(rows):
        for column in columns:
            row[column] = PAYLOADS[i % len(PAYLOADS)]
    with open(target, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return target


def hostile_json(source: Path, fields: list[str], target: Path) -> Path:
    document = json.loads(source.read_text())
    for run in document["runs"]:
        for field in fields:
            _poison(run, field)
    target.write_text(json.dumps(document))
    return target


def _poison(run: dict, field: str) -> None:
    if field == "blocks[].drafted[].text":
        for i, block in enumerate(run["blocks"]):
            block["drafted"] = [[token, PAYLOADS[(i + j) % len(PAYLOADS)]] for j, (token, _) in enumerate(block["drafted"])]
        return
    if field.startswith(("rows[].", "blocks[].")):
        group, key = field.split("[].")
        for i, item in enumerate(run[group]):
            item[key] = PAYLOADS[i % len(PAYLOADS)]
        return
    if "." in field:
        group, key = field.split(".")
        run[group][key] = PAYLOADS[len(key) % len(PAYLOADS)]
        return
    run[field] = PAYLOADS[len(field) % len(PAYLOADS)]
