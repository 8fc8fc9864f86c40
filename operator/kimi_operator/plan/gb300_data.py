"""Kimi K3 on GB300 as NVIDIA AIConfigurator models it: aiconfigurator-core's Kimi K3 model (93
layers: 69 KDA + 24 MLA, 896 experts top-16, DSpark drafts) over its GB300 vLLM database of
kernel measurements (GEMM, MoE, MLA context and generation, KDA, NCCL and custom all-reduce).

Queried as `aiconfigurator cli estimate --system gb300 --backend vllm --tp-size N --moe-tp-size N`
runs them: the experts tensor-parallel over the group, as vLLM runs them without
`--enable-expert-parallel` (the operator sets none; docs/architecture.md). A decode step is the
compiled engine's generation-only step of `batch` sequences at a context; a lone request's TTFT
is the estimate's at batch 1 (its prefill step and vLLM's per-request dispatch cost); an estimate
is its aggregated (continuous-batching) TTFT and TPOT.

aiconfigurator-core is the `plan` extra's: imported here only, when a GB300 built-in or a
side-by-side needs it (docs/planning.md gives its import time and size). Anything it cannot
answer (not installed, a system or configuration it has no data for) is `DataUnavailable`, with
one line saying why.
"""

import logging
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

SYSTEM: Final = "gb300"
BACKEND: Final = "vllm"
MODEL_PATH: Final = "moonshotai/Kimi-K3"
DISTRIBUTION: Final = "aiconfigurator-core"


class DataUnavailable(Exception):
    """The data cannot answer: the message says why, in one line."""


@dataclass(frozen=True)
class Estimate:
    """AIConfigurator's aggregated estimate: TTFT, and time per output token after the first."""

    ttft_s: float
    tpot_s: float


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _database_version(perf_database: Any, system: str) -> str | None:
    """The data's version: aiconfigurator's maintained default (its version slots' `current`,
    what `get_latest_database_version` answers first) where its tables load, without that
    function's scan of every system's tables first (a second of YAML a call, twice in every
    process that prices a GB300 built-in); else what it answers."""
    slots = perf_database.get_version_slots(system, BACKEND)
    if slots and perf_database.get_database(system, BACKEND, slots["current"]) is not None:
        return str(slots["current"])
    latest: str | None = perf_database.get_latest_database_version(system=system, backend=BACKEND)
    return latest


class Gb300Model:
    """One group of `gpus` GB300 GPUs (TP) verifying `drafts` DSpark drafts a step (0: none)."""

    def __init__(self, gpus: int, drafts: int, system: str = SYSTEM) -> None:
        self.gpus, self.drafts = gpus, drafts
        try:
            # Its tables' loader warns of shapes it takes from other frameworks' rows: what it
            # measured and what it borrowed is in docs/planning.md, not on every plan's stderr.
            logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
            from aiconfigurator_core.sdk import perf_database  # noqa: PLC0415
            from aiconfigurator_core.sdk.backends.factory import get_backend  # noqa: PLC0415
            from aiconfigurator_core.sdk.config_builders import build_model_config  # noqa: PLC0415
            from aiconfigurator_core.sdk.models import get_model  # noqa: PLC0415
        except ImportError:
            raise DataUnavailable(
                f"{DISTRIBUTION} is not installed (pip install 'kimi-operator[plan]')"
            ) from None
        try:
            version = _database_version(perf_database, system)
            database = perf_database.get_database(system, BACKEND, version) if version else None
            if version is None or database is None:
                raise DataUnavailable(f"{DISTRIBUTION} has no {BACKEND} data for system {system}")
            config = build_model_config(
                tp_size=gpus, pp_size=1, attention_dp_size=1, moe_tp_size=gpus, moe_ep_size=1
            )
            config.nextn = drafts
            self._model: Any = get_model(MODEL_PATH, config, BACKEND)
        except DataUnavailable:
            raise
        except Exception as error:  # its own errors: asserts, ValueError, NotImplementedError
            raise DataUnavailable(
                f"{DISTRIBUTION} cannot model Kimi K3 on {gpus} {system} GPUs with {drafts} "
                f"drafts: {_one_line(error)}"
            ) from None
        self.version: str = version
        self._database: Any = database
        self._backend = get_backend
        self._system = system

    def _ask(self, what: str, query: Any) -> Any:
        try:
            return query()
        except Exception as error:
            raise DataUnavailable(
                f"{DISTRIBUTION} has no {what} for Kimi K3 on {self.gpus} {self._system} GPUs: "
                f"{_one_line(error)}"
            ) from None

    def decode_step_s(self, batch: int, context: int) -> float:
        """A generation-only step of `batch` sequences of `context` KV tokens each."""
        from aiconfigurator_core.sdk.rust_engine_step import (  # noqa: PLC0415
            estimate_decode_step_latency_with_rust,
        )

        milliseconds = self._ask(
            "decode step",
            lambda: estimate_decode_step_latency_with_rust(
                self._model, self._database, gen_tokens=batch, isl=max(context, 1), osl=2
            ),
        )
        return float(milliseconds) / 1e3

    def estimate(
        self, batch: int, prompt: int, output: int, *, cached: int = 0, tokens_per_step: float = 1.0
    ) -> Estimate:
        """The aggregated estimate of `batch` concurrent requests of `prompt` tokens (`cached`
        of them from the prefix cache) and `output` tokens, `tokens_per_step` a decode step."""
        from aiconfigurator_core.sdk.config import RuntimeConfig  # noqa: PLC0415

        def run() -> Any:
            config = RuntimeConfig(isl=prompt, osl=output, batch_size=batch, prefix=cached)
            extra = {"decode_tokens_per_iteration": tokens_per_step} if self.drafts else {}
            backend = self._backend(BACKEND)  # a fresh one: it caches results by shape alone
            return backend.run_agg(
                self._model, self._database, config, ctx_tokens=prompt, **extra
            ).get_result_dict()

        result = self._ask("estimate", run)
        return Estimate(ttft_s=float(result["ttft"]) / 1e3, tpot_s=float(result["tpot"]) / 1e3)


@cache
def gb300_model(gpus: int, drafts: int) -> Gb300Model:
    """The data's model of one (TP, drafts) group, built once (raises DataUnavailable)."""
    return Gb300Model(gpus, drafts)
