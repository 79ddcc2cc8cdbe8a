"""Draft-only: the draft model alone, a token a block (the paper's weakest baseline)."""

from ..origins import DRAFT as ALONE
from .base import Method

DRAFT = Method(name="draft", title="draft only", models="DM", origins=(ALONE,))
