"""The precisions a pair runs in, by the names settings, records and the command line use."""

from __future__ import annotations

import torch

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bf16" (a dtype outside DTYPES raises StopIteration, as it never should occur)."""
    return next(name for name, value in DTYPES.items() if value == dtype)
