"""EASD Lab: entropy-aware speculative decoding (EASD) next to speculative decoding (SD).

from easd import DecodeSettings, Generation, load_named_pair
pair = load_named_pair("tiny-random")
trace = Generation(pair, "Tom has 3 apples...", DecodeSettings(method="easd")).run()
print(trace.text, trace.summary())
"""

from ._version import __version__
from .errors import EasdError, ModelLoadError, SettingsError
from .method import trace
from .method.decoding import Block, Generation
from .method.pair import ModelPair
from .method.settings import DecodeSettings
from .method.trace import TokenRecord, Trace
from .pairs.loading import load_pair
from .pairs.registry import PAIRS, default_pair_name, load_named_pair

__all__ = [
    "__version__",
    "Block",
    "DecodeSettings",
    "EasdError",
    "Generation",
    "ModelLoadError",
    "ModelPair",
    "PAIRS",
    "SettingsError",
    "Trace",
    "TokenRecord",
    "default_pair_name",
    "trace",
    "load_named_pair",
    "load_pair",
]
