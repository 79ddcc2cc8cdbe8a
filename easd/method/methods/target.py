"""Target-only: the target model alone, a token a block (the accuracy SD must reproduce)."""

from .base import Method

TARGET = Method(name="target", title="target only", models="TM", origins=("target",))
