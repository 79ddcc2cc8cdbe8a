"""Draft-only: the draft model alone, a token a block (the paper's weakest baseline)."""

from .base import Method

DRAFT = Method(name="draft", title="draft only", models="DM", origins=("draft",))
