"""A trained head on disk: one safetensors file, keyed by its target and verified when read.

The file holds the head's linear layers as int8 with one scale per output row (specdec/kernels/quant.py's
int8 form: it is small enough to ship in the repository, and the w8a8 kernel takes it as it is),
its norms and biases in float32, and one JSON record in the file's metadata:

- `target`: the weights the head was trained on (`name`, `weights_sha256`: the GGUF's SHA-256 for
  the embedded pair, else a digest of the target's tensors) and its tokenizer's fingerprint
  (specdec/models/vocab_subset.py);
- `shape` (specdec/core/head.py's HeadShape), `recipe` (how it was trained: data, steps, settings)
  and `figures` (its validation acceptance by draft position, the data's tokens, the time it took);
- `tensors_sha256`: a digest of every tensor, so a damaged file is caught, not run.

Beside the head's layers the file may hold `vocab_ids`: the sorted token ids the head drafts from,
counted from its training data (specdec/train/vocabulary.py); the record's recipe says how many.
A file without them drafts from the shipped frequency list's most frequent tokens.

`read_head` refuses a file that is missing, truncated or damaged, of another format, trained for
other weights or tokenizer, or shaped unlike the target, with one line (HeadFileError) naming
what was wrong; the head is then not offered (`find_head`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from specdec.core.head import HeadShape, HeadWeights, RMSNorm
from specdec.kernels.quant import QuantWeight, quantize

FORMAT = 1  # layout of a head file; bump it when the layout or the record changes
RECORD = "specdec_head"  # the metadata key of the JSON record
VOCAB = "vocab_ids"  # the tensor of the token ids the head drafts from, where the file carries its own


class HeadFileError(ValueError):
    """A head file that cannot be used; the message is one line naming the file and what was wrong."""


@dataclass
class StoredHead:
    path: Path
    record: dict  # the JSON record (see the module docstring)
    tensors: dict[str, torch.Tensor]

    @property
    def shape(self) -> HeadShape:
        return HeadShape(**self.record["shape"])

    @property
    def ids(self) -> torch.Tensor | None:
        """(N,) the sorted token ids the head drafts from, counted from its training data; None: the file has none."""
        return self.tensors.get(VOCAB)

    @property
    def digest(self) -> str:
        """The digest of the file's tensors (verified when read): what a built head and its measured step are keyed by."""
        return self.record["tensors_sha256"]


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def head_tensors(head: HeadWeights) -> dict[str, torch.Tensor]:
    """Linear weights as int8 rows (`.q`, `.scale`), biases and norms in float32."""
    out = {}
    for name, module in head.named_modules():
        if isinstance(module, nn.Linear):
            out.update(quantize(module.weight.detach().float(), 8).tensors(name))
            if module.bias is not None:
                out[f"{name}.bias"] = module.bias.detach().float().contiguous()
        elif isinstance(module, RMSNorm):
            out[f"{name}.weight"] = module.weight.detach().float().contiguous()
    return out


def save_head(path: Path, head: HeadWeights, target: dict, recipe: dict, figures: dict, ids: torch.Tensor | None = None) -> Path:
    """Write the head (int8) with its record, and the token ids it drafts from where given (the
    recipe's `vocab_ids` is then their count); written to a temporary name and renamed when complete."""
    tensors = head_tensors(head)
    if ids is not None:
        tensors[VOCAB] = ids.to(torch.int64).sort().values.contiguous()
        recipe = {**recipe, "vocab_ids": int(ids.numel())}
    return write_head(path, tensors, target, head.shape.as_dict(), recipe, figures)


def write_head(path: Path, tensors: dict[str, torch.Tensor], target: dict, shape: dict, recipe: dict, figures: dict) -> Path:
    """The file itself: the tensors as given, the record, the digest."""
    import os

    from safetensors.torch import save_file

    record = {"format": FORMAT, "target": target, "shape": shape, "recipe": recipe, "figures": figures,
              "tensors_sha256": tensors_digest(tensors)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    save_file(tensors, partial, metadata={RECORD: json.dumps(record)})
    os.replace(partial, path)
    return path


def read_head(path: Path, target: dict | None = None, config=None) -> StoredHead:
    """The stored head, verified: whole, of this format, and (when given) for this target (its key,
    target_key) and shaped like its config. HeadFileError with one line otherwise."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise HeadFileError(f"no head file at {path}")
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, RuntimeError) as err:
        raise HeadFileError(f"head file {path} is truncated or damaged ({path.stat().st_size} bytes: {_first_line(err)})") from None
    try:
        record = json.loads(meta[RECORD])
    except (KeyError, ValueError):
        raise HeadFileError(f"head file {path} has no head record (not a file `python -m specdec head train` wrote)") from None
    if record.get("format") != FORMAT:
        raise HeadFileError(f"head file {path} is of format {record.get('format')!r}, this code reads format {FORMAT}: retrain it")
    if tensors_digest(tensors) != record.get("tensors_sha256"):
        raise HeadFileError(f"head file {path} is damaged: its tensors do not match the digest it was written with")
    if target is not None:
        check_target(path, record.get("target", {}), target)
    if config is not None:
        check_shape(path, HeadShape(**record["shape"]), config)
    if VOCAB in tensors:
        check_ids(path, tensors[VOCAB], record.get("recipe", {}).get("vocab_ids"), getattr(config, "vocab_size", None))
    return StoredHead(path, record, tensors)


def check_ids(path: Path, ids: torch.Tensor, count, rows: int | None) -> None:
    """The stored vocabulary: one row of sorted, distinct token ids, as many as the record says, inside the target's vocabulary."""
    wrong = ""
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        wrong = f"a {ids.dim()}-d {ids.dtype} tensor, not a row of token ids"
    elif ids.numel() != count:
        wrong = f"{ids.numel()} ids, and its record says {count}"
    elif ids.numel() and (int(ids.min()) < 0 or (rows is not None and int(ids.max()) >= rows)):
        wrong = f"ids outside the target's vocabulary of {rows} tokens"
    elif ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        wrong = "ids that are not sorted and distinct"
    if wrong:
        raise HeadFileError(f"head file {path} has a vocabulary that does not match its record: {wrong}")


def check_target(path: Path, trained: dict, target: dict) -> None:
    for field, what in (("weights_sha256", "weights"), ("tokenizer", "tokenizer")):
        if trained.get(field) != target.get(field):
            raise HeadFileError(
                f"head file {path} was trained for target {trained.get('name')!r} ({what} {str(trained.get(field))[:12]}), "
                f"not for {target.get('name')!r} ({what} {str(target.get(field))[:12]})")


def check_shape(path: Path, shape: HeadShape, config) -> None:
    want = HeadShape.of_target(config, shape.intermediate)
    if want != shape:
        differ = [f"{k} {getattr(shape, k)} vs {getattr(want, k)}" for k in shape.as_dict() if getattr(shape, k) != getattr(want, k)]
        raise HeadFileError(f"head file {path} is shaped for another target: {', '.join(differ)}")


def build_head(stored: StoredHead, dtype: torch.dtype, device: torch.device | str = "cpu", kernel: str = "dense") -> HeadWeights:
    """The head's modules from its stored tensors: linear layers dequantized into `dtype` ("dense"),
    or run by the w8a8 kernel on the stored int8 rows ("w8a8"); norms in `dtype`."""
    device = torch.device(device)
    t = stored.tensors
    with torch.device("meta"):
        head = HeadWeights(stored.shape)
    for name, module in list(head.named_modules()):
        bias = t.get(f"{name}.bias")
        if isinstance(module, nn.Linear):
            weight = QuantWeight.from_tensors(t, name, 8, 0)
            head.set_submodule(name, _linear(weight, bias, dtype, device, kernel))
        elif isinstance(module, RMSNorm):
            module.weight = nn.Parameter(t[f"{name}.weight"].to(device, dtype), requires_grad=False)
    head.inv_freq = HeadWeights.rotary_frequencies(stored.shape).to(device)
    return head.eval()


def _linear(weight: QuantWeight, bias, dtype, device, kernel: str) -> nn.Module:
    if kernel == "w8a8":
        from specdec.kernels.w8a8 import W8A8Linear

        return W8A8Linear(weight, bias, device)
    if kernel != "dense":
        raise ValueError(f"a head runs its layers dense or w8a8, got {kernel!r}")
    out, cols = weight.q.shape
    linear = nn.Linear(cols, out, bias=bias is not None, device="meta")
    linear.weight = nn.Parameter(weight.dequantize().to(device, dtype), requires_grad=False)
    if bias is not None:
        linear.bias = nn.Parameter(bias.to(device, dtype), requires_grad=False)
    return linear


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
