"""Kimi K3 MLA decode: the torch reference and the CuTe DSL kernel (split-KV + LSE combine).

``mla_decode`` (the kernel; needs ``nvidia-cutlass-dsl`` and, to run, a GPU) is imported on first
use so that the reference and the host-side helpers import without the DSL.
"""

from typing import Any

from kimi_kernels.mla_decode.reference import merge_partials, mla_decode_reference

__all__ = ["merge_partials", "mla_decode", "mla_decode_reference"]


def __getattr__(name: str) -> Any:
    if name == "mla_decode":
        from kimi_kernels.mla_decode.interface import mla_decode  # noqa: PLC0415

        return mla_decode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
