"""`python -m easd site SOURCES... -o SITE`: recorded runs, evaluations and studies as one static site, ready for a
Static Space or GitHub Pages (easd.lab.site builds it; docs/app-and-api.md, "A static site").

SITE/index.html lists every source; SITE/runs/ holds a page per comparison (the one-file export's lanes, inspector,
figures and links to a token; an eval's or a study's in runs/FOLDER/, one per problem id), SITE/evals/ and
SITE/studies/ a page per folder, SITE/assets/ Plotly and the page script once for all, and SITE/README.md the Space's
front matter. Anything else in SITE (a CNAME, a .git) is the user's, and a rebuild keeps it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "site"
HELP = "recorded runs, eval folders and study folders as one static site (a Static Space, GitHub Pages, or a folder)"


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sources",
        type=Path,
        nargs="+",
        help="trace files (.json, .csv: gallery recordings, the app's, `generate`'s), folders of them (assets/gallery: its "
        "index.json titles them), `eval --traces` folders and `study` folders",
    )
    parser.add_argument(
        "-o", "--out", required=True, help="the site's folder (new, empty, or a site built before: its other files are kept)"
    )
    parser.add_argument("--title", default="EASD Lab", help="the home page's and the Space's title")
    parser.add_argument(
        "--max-trace-mb",
        type=float,
        default=64,
        help="refuse a trace file larger than this many MB (its page, which holds every token's details, is about 1.6× as large)",
    )


def run(args: argparse.Namespace) -> int:
    from ..errors import SettingsError
    from ..lab.site import build_site

    if not args.out.strip():  # Path("") would be "." (the current folder), which nobody meant
        raise SettingsError("--out", "give the site's folder, e.g. -o site/")
    out = build_site(args.sources, Path(args.out), args.title, args.max_trace_mb)
    files = [p for p in out.rglob("*") if p.is_file()]  # one walk of a site that may hold thousands of pages
    pages = sum(p.suffix == ".html" for p in files)
    size = sum(p.stat().st_size for p in files)
    print(
        f"wrote {out}: {pages} pages, {size / 2**20:.1f} MB; open {out / 'index.html'}, or publish the folder (docs/app-and-api.md)"
    )
    return 0
