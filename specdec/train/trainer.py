"""Training the head: its starting point, the batches, one optimizer step, and checkpoints.

Every step is fixed by the seed and the step number (the batch order of each epoch is a permutation
drawn from (seed, epoch)), so a run that resumes from a checkpoint goes on exactly as an
uninterrupted run would. On a CPU with native bf16 the products run under bf16 autocast, weights
and optimizer state stay float32.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from torch import nn

from specdec.core.head import HeadShape, HeadWeights
from specdec.train.data import Sequence
from specdec.train.fusion import Fusion
from specdec.train.objective import batch_vocabulary, soft_labels, step_losses
from specdec.train.recipe import Recipe
from specdec.train.unroll import unroll


def new_head(target, recipe: Recipe, seed: int) -> HeadWeights:
    """A head for `target` (float32), started as the recipe says."""
    torch.manual_seed(seed)
    head = HeadWeights(HeadShape.of_target(target.config, recipe.intermediate))
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    h = head.shape.hidden
    with torch.no_grad():
        head.fc.weight[:, :h].copy_(torch.eye(h))  # x starts as f_t (plus a little of the token's embedding)
        head.norm.weight.copy_(target.model.norm.weight.float())  # the output lives where the target's features do
        if recipe.init == "last-layer":
            copy_last_layer(head, target)
        elif recipe.init != "random":
            raise ValueError(f"init must be last-layer or random, got {recipe.init!r}")
    return head


def copy_last_layer(head: HeadWeights, target) -> None:
    """The target's last layer's attention and norms as they are, and the MLP channels with the
    largest |gate| * |up| * |down| (the head's MLP is narrower)."""
    layer = target.model.layers[-1]
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        getattr(head, name).load_state_dict({k: v.float() for k, v in getattr(layer.self_attn, name).state_dict().items()})
    head.input_layernorm.weight.copy_(layer.input_layernorm.weight.float())
    head.post_attention_layernorm.weight.copy_(layer.post_attention_layernorm.weight.float())
    mlp = layer.mlp
    gate, up, down = (getattr(mlp, n).weight.float() for n in ("gate_proj", "up_proj", "down_proj"))
    strength = gate.norm(dim=1) * up.norm(dim=1) * down.norm(dim=0)  # (8960,)
    keep = strength.topk(head.shape.intermediate).indices.sort().values
    head.gate_proj.weight.copy_(gate[keep])
    head.up_proj.weight.copy_(up[keep])
    head.down_proj.weight.copy_(down[:, keep])


def epoch_batches(windows: list[Sequence], recipe: Recipe, seed: int, epoch: int) -> list[list[int]]:
    """The epoch's batches (indices into `windows`), drawn from (seed, epoch): a permutation, each
    run of recipe.alike windows sorted by length and cut into batches of at most batch_positions
    positions when padded to their longest window, and the batches shuffled. Windows alike in length
    pad little: answers of about 170 tokens beside chunks of 512 read text made about a fifth of every
    batch padding. alike = 0: the permutation cut as it comes (how the heads before it were trained)."""
    generator = torch.Generator().manual_seed(seed * 1000 + epoch)
    order = torch.randperm(len(windows), generator=generator).tolist()
    if recipe.alike <= 0:
        return _cut(order, windows, recipe.batch_positions)
    batches = []
    for start in range(0, len(order), recipe.alike):
        batches += _cut(sorted(order[start : start + recipe.alike], key=lambda i: len(windows[i])), windows, recipe.batch_positions)
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def _cut(order: list[int], windows: list[Sequence], positions: int) -> list[list[int]]:
    """`order` cut into batches of at most `positions` positions when padded to their longest window."""
    batches, current, longest = [], [], 0
    for i in order:
        n = len(windows[i])
        if current and max(longest, n) * (len(current) + 1) > positions:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


def padded(windows: list[Sequence]) -> tuple[torch.Tensor, ...]:
    """-> ids (B, T), features (B, T, H) bf16, top_ids (B, T, TOP), top_logp (B, T, TOP), valid (B, T)
    bool, padded at the end."""
    b, length = len(windows), max(len(w) for w in windows)
    top = windows[0].top_ids.shape[1]
    ids, valid = torch.zeros(b, length, dtype=torch.long), torch.zeros(b, length, dtype=torch.bool)
    feats = torch.zeros(b, length, windows[0].features.shape[1], dtype=torch.bfloat16)
    top_ids, top_logp = torch.zeros(b, length, top, dtype=torch.long), torch.zeros(b, length, top)
    for r, w in enumerate(windows):
        n = len(w)
        ids[r, :n], feats[r, :n], top_ids[r, :n], top_logp[r, :n], valid[r, :n] = w.ids, w.features, w.top_ids, w.top_logp, True
    return ids, feats, top_ids, top_logp, valid


def padded_layers(windows: list[Sequence]) -> torch.Tensor:
    """-> (B, T, 2, H) bf16: the windows' low and middle layers' rows (Recipe.fusion), padded at the end."""
    b, length, h = len(windows), max(len(w) for w in windows), windows[0].features.shape[1]
    out = torch.zeros(b, length, 2, h, dtype=torch.bfloat16)
    for r, w in enumerate(windows):
        if w.layers is None:
            raise ValueError("the head is trained with fused features (Recipe.fusion), and this data kept no layers' rows")
        out[r, : len(w)] = w.layers
    return out


def learning_rate(recipe: Recipe, step: int, steps: int) -> float:
    warm = max(1, int(0.05 * steps))
    if step < warm:
        return recipe.lr * (step + 1) / warm
    done = (step - warm) / max(1, steps - warm)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(done, 1.0))))


class Trainer:
    """The head, its optimizer and the frozen pieces of the target it trains against."""

    def __init__(self, head: HeadWeights, embed, lm_weight: torch.Tensor, recipe: Recipe, autocast: bool):
        self.head, self.embed, self.recipe = head.to(lm_weight.device), embed, recipe
        self.device = lm_weight.device
        self.lm_weight = lm_weight.detach()  # (V, H) the target's lm_head, frozen (each batch takes its rows)
        self.autocast = autocast  # bf16 autocast (where the pair itself runs in bf16), float32 weights
        shape = head.shape
        self.fusion = Fusion(shape.hidden, shape.eps).to(self.device) if recipe.fusion else None  # EAGLE-3's fused input
        trained = list(head.parameters()) + (list(self.fusion.parameters()) if self.fusion is not None else [])
        self.optimizer = torch.optim.AdamW(trained, lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.0)

    def read(self, feats: torch.Tensor, batch: list[Sequence]) -> torch.Tensor | None:
        """What the head reads of the batch's real pairs: the fused rows (B, T, H), or None (the features)."""
        if self.fusion is None:
            return None
        return self.fusion(feats, padded_layers(batch).to(self.device).float())

    def step(self, batch: list[Sequence], lr: float) -> dict:
        """One optimizer step on `batch`; the losses by draft step."""
        ids, feats, top_ids, top_logp, valid = (t.to(self.device) for t in padded(batch))
        with torch.no_grad():
            embeds = self.embed(ids).float()
            vocab = batch_vocabulary(top_ids, valid)  # (M,)
            labels = soft_labels(top_ids, top_logp, vocab)  # (B, T, M)
            rows = self.lm_weight[vocab].to(torch.bfloat16 if self.autocast else torch.float32)  # (M, H)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with self.autocasting():
            steps = unroll(self.head, feats.float(), embeds, self.recipe.depth, self.read(feats.float(), batch))
            total, parts = 0.0, {}
            for s, predicted in enumerate(steps, start=1):
                cross, regression = step_losses(predicted, feats, labels, rows, valid, s)
                total = total + self.recipe.step_decay ** (s - 1) * (cross + self.recipe.reg_weight * regression)
                parts[f"ce{s}"] = cross.item()
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_([p for group in self.optimizer.param_groups for p in group["params"]], 1.0)
        self.optimizer.step()
        parts["loss"] = total.item()
        return parts

    def autocasting(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast)

    def save(self, path: Path, state: dict) -> None:
        """The head, the optimizer and `state` (step, curve ...), written whole or not at all."""
        partial = Path(path).with_name(f".{Path(path).name}.partial")
        fusion = {"fusion": self.fusion.state_dict()} if self.fusion is not None else {}
        torch.save({"head": self.head.state_dict(), "optimizer": self.optimizer.state_dict(), **fusion, **state}, partial)
        os.replace(partial, path)

    def restore(self, path: Path) -> dict | None:
        """The state saved with the checkpoint at `path`, the head and optimizer loaded; None when there is none."""
        try:
            saved = torch.load(path, weights_only=False)
        except (OSError, RuntimeError, EOFError):
            return None
        self.head.load_state_dict(saved.pop("head"))
        if self.fusion is not None:
            self.fusion.load_state_dict(saved.pop("fusion"))
        self.optimizer.load_state_dict(saved.pop("optimizer"))
        return saved
