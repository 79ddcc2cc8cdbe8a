"""EASD Lab: entropy-aware speculative decoding (EASD) next to speculative decoding (SD).

from easd import DecodeSettings, Generation, load_named_pair, summarize
pair = load_named_pair("tiny-random")
trace = Generation(pair, "Tom has 3 apples...", DecodeSettings(method="easd")).run()
print(trace.text, summarize(trace))
"""

from ._version import __version__
from .errors import EasdError, ModelLoadError, SettingsError
from .method import trace
from .method.generation import Generation
from .method.judging import Block
from .method.methods import make_settings
from .method.pair import ModelPair
from .method.settings import DecodeSettings
from .method.summary import summarize
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
    "make_settings",
    "summarize",
]
