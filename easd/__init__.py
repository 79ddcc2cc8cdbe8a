"""EASD Lab: entropy-aware speculative decoding (EASD) next to speculative decoding (SD).

from easd import DecodeSettings, Generation, load_named_pair
pair = load_named_pair("tiny-random")
trace = Generation(pair, "Tom has 3 apples...", DecodeSettings(method="easd")).run()
print(trace.text, trace.summary())
"""

__version__ = "0.1.0"

from .decoding import Block, Generation  # noqa: E402
from .errors import EasdError, ModelLoadError, SettingsError  # noqa: E402
from .models import ModelPair, load_pair  # noqa: E402
from .pairs import PAIRS, default_pair_name, load_named_pair  # noqa: E402
from .settings import DecodeSettings  # noqa: E402
from .trace import TokenRecord, Trace  # noqa: E402

__all__ = [
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
    "load_named_pair",
    "load_pair",
]
