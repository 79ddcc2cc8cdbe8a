"""EASD Lab: entropy-aware speculative decoding (EASD) next to speculative decoding (SD).

from easd import DecodeSettings, Generation, load_named_pair, save_traces, summarize
pair = load_named_pair("tiny-random")
trace = Generation(pair, "Tom has 3 apples...", DecodeSettings(method="easd")).run()
print(trace.text, summarize(trace))
save_traces([trace], "run.json")  # or .csv; load_traces(path) reads either back
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
from .traces.files import load as load_traces
from .traces.files import save as save_traces

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
    "load_traces",
    "make_settings",
    "save_traces",
    "summarize",
]
