"""Which trained head a pair gets: its key, where heads are looked for, and the head built for a kernel.

A head is looked for in two places, first that verifies wins (specdec/kernels/head_store.py):
one trained on this machine (`python -m specdec head train` writes `<cache>/heads/<pair>.safetensors`),
then the one shipped in the repository for the pair (SHIPPED), so `make run` on a fresh clone
offers the head without training and without a download. A file that is refused is reported in
one line and skipped; a pair with no usable head is not offered one.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specdec.core.head import HeadRun, HeadWeights
from specdec.kernels.head_store import HeadFileError, StoredHead, build_head, read_head

ASSETS = Path(__file__).resolve().parents[2] / "assets"
SHIPPED = {"qwen2.5-coder-1.5b/0.5b": ASSETS / "heads" / "qwen2.5-coder-1.5b-instruct.safetensors"}
HEAD_VOCAB = 32768  # tokens the head drafts from (the v32k draft variants' subset); q is zero elsewhere


def slug(pair_name: str) -> str:
    return pair_name.replace("/", "_")


def trained_path(pair_name: str) -> Path:
    """Where `head train` writes a head trained on this machine."""
    from specdec.models.bundle import cache_root

    return cache_root() / "heads" / f"{slug(pair_name)}.safetensors"


def target_key(pair) -> dict:
    """What a head is keyed on: the target's weights (the GGUF's SHA-256 for the embedded pair, else
    a digest of the target's tensors, computed once per pair) and its tokenizer's fingerprint."""
    if pair.built.head_target is None:
        from specdec.models.vocab_subset import fingerprint

        if pair.source == "embedded bundle":
            from specdec.models.bundle import BUNDLE_NAME, bundle_models

            model = bundle_models(BUNDLE_NAME)[0]
            name, weights = model.key, model.sha256
        else:
            name, weights = pair.name, weights_digest(pair.target)
        pair.built.head_target = {"name": name, "weights_sha256": weights, "tokenizer": fingerprint(pair.tokenizer)}
    return pair.built.head_target


def weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def head_ids(pair, size: int = HEAD_VOCAB, rows: int | None = None, counts: Counter | None = None) -> torch.Tensor:
    """(N,) the tokens a truncated vocabulary head scores (the trained head's, a `-v16k` / `-v32k`
    draft variant's): end-of-sequence and special tokens, then the most frequent in `counts` (a
    head's training data: specdec/train/vocabulary.py), then the shipped list's most frequent, all
    below `rows` (default: the target's lm_head rows; a draft variant passes its draft's)."""
    from specdec.models.vocab_subset import frequency_order, ranked_ids, subset_ids

    order = pair.token_order if pair.token_order is not None else frequency_order(pair.tokenizer)
    if counts:
        order = [*ranked_ids(counts), *order]
    always = [*sorted(pair.eos_ids), *getattr(pair.tokenizer, "all_special_ids", [])]
    rows = rows if rows is not None else pair.target.get_output_embeddings().out_features
    return subset_ids(order, size, always, rows)


def drafting_ids(pair, stored: StoredHead) -> torch.Tensor | None:
    """(N,) the tokens this head drafts from: the file's own, counted from its training data, else
    head_ids' HEAD_VOCAB; None (all of them) for a target with no more rows than that."""
    if stored.ids is not None:
        return stored.ids
    return head_ids(pair) if pair.target.get_output_embeddings().out_features > HEAD_VOCAB else None


def validation_prior(record: dict) -> float | None:
    """Where the cost K policy starts the head's acceptance estimate: the file's own held-out
    acceptance at draft position 1, counted as a run drafts (its `walk` figures) where the file has
    them, else from every start; the lower of its answers' and its read text's, since the page's
    prompts are neither. None where the file records nothing usable."""
    figures = record.get("figures", {})
    read = figures.get("read_text", {})
    pairs = [(figures.get("walk", {}).get("rates"), read.get("walk", {}).get("rates")),
             (figures.get("acceptance_by_position"), read.get("acceptance"))]
    for answers, text in pairs:
        found = [float(r[0]) for r in (answers, text) if r and r[0] is not None and r[0] == r[0]]  # r[0] == r[0]: not nan
        if found:
            return min(found)
    return None


@dataclass
class HeadOffer:
    stored: StoredHead | None  # the head to run, or None
    refused: list[str] = field(default_factory=list)  # one line per file looked at and refused

    @property
    def reason(self) -> str:
        """Why no head is offered (empty when one is)."""
        if self.stored is not None:
            return ""
        return "; ".join(self.refused) or "no head trained for this pair (train one: python -m specdec head train)"


def find_head(pair, paths: list[Path] | None = None) -> HeadOffer:
    """The first head file among `paths` (default: this machine's, then the shipped one) that is
    whole and was trained for this pair's target."""
    if paths is None:
        paths = [trained_path(pair.name), *([SHIPPED[pair.name]] if pair.name in SHIPPED else [])]
    refused = []
    for path in paths:
        if not Path(path).is_file():
            continue
        try:
            return HeadOffer(read_head(path, target_key(pair), pair.target.config), refused)
        except HeadFileError as err:
            refused.append(str(err))
    return HeadOffer(None, refused)


def offered_head(pair) -> HeadOffer:
    """find_head with the default places, kept per pair while the files looked at stay as they were
    (a head file is verified whole when read: once per process, not once per run)."""
    paths = [trained_path(pair.name), *([SHIPPED[pair.name]] if pair.name in SHIPPED else [])]
    stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) if p.is_file() else (str(p),) for p in paths)
    kept = pair.built.head_offer
    if kept is None or kept[0] != stamp:
        kept = pair.built.head_offer = (stamp, find_head(pair, paths))
    return kept[1]


def require_head(pair, drafter: str = "head") -> StoredHead:
    """The pair's offered head (offered_head); ValueError saying why when it has none, naming the
    `drafter` asked for (auto_head and auto_both draft with the head too)."""
    offer = offered_head(pair)
    if offer.stored is None:
        if drafter == "head":
            raise ValueError(f"drafter 'head' is not offered for pair {pair.name!r}: {offer.reason}")
        raise ValueError(f"drafter {drafter!r} drafts with the trained head, which is not offered for pair {pair.name!r}: "
                         f"{offer.reason}; choose model, lookup or auto")
    return offer.stored


def head_note(pair_name: str) -> str:
    """Whether the head can be offered for `pair_name` before the pair is loaded (the page's Drafter
    choice): "" when a head file for it reads whole (its digest verified) and was trained for the
    target weights the pair loads here, the embedded bundle's; else the one line why not. A run
    checks again with the loaded pair (find_head: the tokenizer and the shape too)."""
    from specdec.models import bundle
    from specdec.models.presets import PRESETS

    preset = PRESETS.get(pair_name)
    paths = [trained_path(pair_name), *([SHIPPED[pair_name]] if pair_name in SHIPPED else [])]
    if not any(p.is_file() for p in paths):
        return f"no head trained for {pair_name} (train one: python -m specdec head train)"
    if preset is None or not preset.bundle or not (bundle.bundle_available(preset.bundle) or bundle.is_converted(preset.bundle)):
        return f"the head is offered for {pair_name} only on the embedded bundle's weights, and this pair loads from elsewhere"
    weights = bundle.bundle_models(preset.bundle)[0].sha256
    refused = []
    for path in (p for p in paths if p.is_file()):
        try:
            trained = read_head(path).record.get("target", {})
        except HeadFileError as err:
            refused.append(str(err))
            continue
        if trained.get("weights_sha256") == weights:
            return ""
        refused.append(f"head file {path} was trained for target {trained.get('name')!r}, not for this pair's weights")
    return "; ".join(refused)


def head_weights(pair, stored: StoredHead, kernel: str = "dense") -> HeadWeights:
    """The head built for the pair's device: dense in the pair's dtype, or on the w8a8 kernel
    (its int8 rows as stored; activations in the pair's dtype)."""
    return build_head(stored, pair.dtype, pair.device, kernel)


def subset_lm_head(pair, ids: torch.Tensor, kernel: str = "dense") -> torch.nn.Module:
    """The target's lm_head on the tokens `ids` only (full-width rows, -inf elsewhere), kept per pair:
    its dense rows in the pair's dtype, or those rows as int8 run by the w8a8 kernel (the same int8
    rows the w8a8 target's head has: one scale per row). Kept by the ids themselves: two heads'
    vocabularies of one size are different rows."""
    key = (kernel, hashlib.sha256(ids.to(torch.int64).cpu().numpy().tobytes()).hexdigest())
    if key not in pair.built.vocab_heads:
        from specdec.kernels.quant import quantize
        from specdec.kernels.variant_store import SubsetHead

        weight = pair.target.get_output_embeddings().weight.detach()[ids.to(pair.device)]  # (N, H)
        vocab = pair.target.get_output_embeddings().out_features
        if kernel == "w8a8":
            from specdec.kernels.w8a8 import W8A8Linear

            inner = W8A8Linear(quantize(weight, 8), None, pair.device)
        else:
            inner = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
            inner.weight = torch.nn.Parameter(weight.contiguous(), requires_grad=False)
        pair.built.vocab_heads[key] = SubsetHead(inner, ids.to(pair.device), vocab)
    return pair.built.vocab_heads[key]


def head_run(pair, head: HeadWeights, lm_head: torch.nn.Module | None = None, target: torch.nn.Module | None = None) -> HeadRun:
    """A HeadRun over `target` (default: the pair's dense target): its embedding, and `lm_head`
    (default: the target's own, every token)."""
    target = target if target is not None else pair.target
    return HeadRun(head, target.get_input_embeddings(), lm_head or target.get_output_embeddings(), None, pair.device)
