"""A trace's files: CSV and JSON in and out (files.py; `easd.load_traces` and `easd.save_traces`), every field checked
(schema.py)."""
