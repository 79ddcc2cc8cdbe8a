"""What a shard records of the files it ran on, for the merge to compare: the data file's and each model's identity."""

from __future__ import annotations

import hashlib
from pathlib import Path


def recorded_files(data: Path, pair: str | None, draft: str | None, target: str | None) -> dict[str, str]:
    """The data file's and each model's identity (`model_files`), for run.json."""
    return {"data": "sha256:" + _file_sha(data), **model_files(pair, draft, target)}


# named pairs whose files this program fixes: the embedded pair's GGUFs are pinned by their sha256 (checked when their
# parts are joined), and the tiny pair is built from a seed by easd.pairs.tiny
PINNED = {"qwen-coder": "the embedded pair", "tiny-random": "the tiny pair"}


def model_files(pair: str | None, draft: str | None, target: str | None) -> dict[str, str]:
    """What the weights each model ran are: a file's or a folder's sha256 (a folder: its files' names and contents),
    a hub model's revision in this machine's hub cache, or a named pair's pinned files. Reading a model's files takes
    about a second a GB, once a run."""
    from ...pairs.registry import PAIRS, default_pair_name

    if draft is None:
        name = pair or default_pair_name()
        if name == "qwen-coder":
            from ...pairs.packaged import DRAFT, TARGET

            return {"draft": "sha256:" + DRAFT.sha256, "target": "sha256:" + TARGET.sha256}
        if name in PINNED:
            return {"draft": f"{PINNED[name]}'s, built by easd", "target": f"{PINNED[name]}'s, built by easd"}
        draft, target = PAIRS[name].draft, PAIRS[name].target
    return {"draft": _model_identity(draft), "target": _model_identity(target)}


def _model_identity(reference: str) -> str:
    path = Path(reference).expanduser()
    if path.is_file():
        return "sha256:" + _file_sha(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.relative_to(path).as_posix().startswith(".")):
            digest.update(f"{file.relative_to(path).as_posix()}\0{_file_sha(file)}\n".encode())
        return "sha256:" + digest.hexdigest()
    return f"hub {reference}@{_cached_revision(reference) or 'not in the hub cache of the machine that ran it'}"


def _file_sha(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _cached_revision(repo_id: str) -> str | None:
    """The commit of the hub cache's snapshot of `repo_id`, which names its files' contents."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # not a repository id the hub library accepts: nothing cached under it
        return None
    return Path(found).parent.name if isinstance(found, str) else None
