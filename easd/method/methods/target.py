"""Target-only: the target model alone, a token a block (the accuracy SD must reproduce)."""

from ..origins import TARGET as ALONE
from .base import Method

TARGET = Method(name="target", title="target only", models="TM", origins=(ALONE,))
