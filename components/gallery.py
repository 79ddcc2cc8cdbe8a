"""The gallery: recorded comparisons shipped in `assets/gallery`, opened at once and without a model.

`assets/gallery/index.json` lists each recording: a key, a title, one sentence on what to look
at, its trace file, and the prompt and settings it was made with. The browser only ever sends a
key from that list; the file behind it is the server's choice, and it passes the same checks as
an upload (`easd.traces.files.load`).

Record them again (the embedded pair, every comparison in one batch; float32 rows do not depend
on the batch they are in):

    python -m components.gallery --record                  # or --keys shirt,sampling for some of them
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from easd.errors import SettingsError, shown
from easd.method.compare import Comparison
from easd.method.methods import make_settings
from easd.method.settings import WHATIF_TOP, DecodeSettings
from easd.method.step import Batch
from easd.method.summary import summarize
from easd.method.trace import Trace
from easd.pairs.loading import Runtime
from easd.traces import files as trace_io

FOLDER = Path(__file__).resolve().parent.parent / "assets" / "gallery"


@dataclass(frozen=True)
class Recording:
    key: str
    title: str  # what the gallery's list shows
    shows: str  # one sentence: what to look at in it
    file: str  # a JSON trace file in the gallery folder: the SD and EASD runs, their prompt and settings inside
    prompt: str
    settings: dict  # DecodeSettings fields that differ from the defaults

    def decode_settings(self) -> DecodeSettings:
        """What the recording ran with; traces keep WHATIF_TOP candidates, as the app's runs do, for the what-if."""
        return make_settings(self.settings, record_top=WHATIF_TOP).validate()


class Gallery:
    def __init__(self, folder: Path = FOLDER):
        self.folder = folder
        index = folder / "index.json"
        entries = json.loads(index.read_text(encoding="utf-8")) if index.is_file() else []
        self.recordings = {entry["key"]: Recording(**entry) for entry in entries}

    def choices(self) -> list[tuple[str, str]]:
        return [(r.title, key) for key, r in self.recordings.items()]

    def open(self, key) -> tuple[Recording, list[Trace]]:
        recording = self.recordings.get(key) if isinstance(key, str) else None
        if recording is None:
            raise SettingsError("recorded run", f"must be one of the gallery's runs (got {shown(key)})")
        return recording, trace_io.load(self.folder / recording.file)

    def record(self, pair, keys: list[str]) -> None:
        """Decode the recordings `keys` again on `pair`, all comparisons in one batch, and write their files
        (compact JSON: 20 candidates a token make them large)."""
        comparisons = {key: Comparison(pair, self.recordings[key].prompt, self.recordings[key].decode_settings()) for key in keys}
        Batch(pair, [g for c in comparisons.values() for g in c.generations.values()]).run()
        for key, comparison in comparisons.items():
            traces = list(comparison.traces.values())
            compact = json.dumps(trace_io.to_json_dict(traces), ensure_ascii=False, separators=(",", ":"))
            (self.folder / self.recordings[key].file).write_text(compact, encoding="utf-8")
            summary = summarize(traces[1])
            print(f"{key}: fork at {summary['first_penalty_position']}, {summary['penalized']} penalties")
            for trace in traces:
                print(f"  {trace.settings.method}: {trace.text[-160:]!r}")


def main(argv: list[str] | None = None) -> None:
    from easd.backends import configure_threads
    from easd.pairs.registry import load_named_pair

    parser = argparse.ArgumentParser(description="Record the gallery's comparisons again from assets/gallery/index.json")
    parser.add_argument("--record", action="store_true", required=True)
    parser.add_argument("--pair", default="qwen-coder", help="the pair to record with (default: the embedded one)")
    parser.add_argument("--keys", default="", help="comma-separated keys of index.json to record (default: all)")
    args = parser.parse_args(argv)
    gallery = Gallery()
    keys = [k for k in args.keys.split(",") if k] or list(gallery.recordings)
    unknown = [k for k in keys if k not in gallery.recordings]
    if unknown:
        parser.error(f"--keys: {', '.join(unknown)} not in {gallery.folder / 'index.json'}")
    configure_threads()
    gallery.record(load_named_pair(args.pair, Runtime(backend="transformers", dtype="float32")), keys)


if __name__ == "__main__":
    main()
