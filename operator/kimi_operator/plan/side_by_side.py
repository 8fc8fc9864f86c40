"""Each GB300 configuration a built-in prices, beside AIConfigurator's estimate of the same TP,
batch, prompt and output (aiconfigurator-core's aggregated estimate, `gb300_data.Estimate`).

The point is the trace's mean prompt and mean output, at batch 1 and at the configuration's
`maxNumSeqs`. The plan's side is its step model at that point, not its replay of the trace: a
lone request's TTFT (at batch 1), and a decode step of that batch with every sequence halfway
through its output, on the path the plan would run it (the fast path where it applies), and
that step over the tokens a step yields (TPOT); AIConfigurator's generation-only step at the same
batch and context is set beside the plan's step. AIConfigurator models stock vLLM (`auto`), no
fast path, and its TPOT at a batch above 1 includes the steps that prefill the batch's other
requests (vLLM's one partial prefill at a time); its TTFT above batch 1, its queueing factor.
"""

import statistics
from dataclasses import dataclass, replace

from kimi_operator.bench.results import Results
from kimi_operator.plan.builtin import NAME, lone_ttft_s
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.configs import Configuration
from kimi_operator.plan.costs import on_fast_path, step_seconds
from kimi_operator.plan.gb300_data import DataUnavailable, gb300_model


@dataclass(frozen=True)
class SideBySide:
    batch: int
    prompt_tokens: int
    output_tokens: int
    plan_ttft_s: float | None  # batch 1 only
    plan_step_s: float  # a decode step of `batch` sequences halfway through their output
    plan_tpot_s: float
    plan_fast_path: bool
    aiconfigurator_ttft_s: float | None  # None: `unavailable` says why
    aiconfigurator_step_s: float | None  # its generation-only step at the same point
    aiconfigurator_tpot_s: float | None
    unavailable: str | None = None


def _plan_point(
    calibration: Calibration, batch: int, prompt: int, output: int
) -> tuple[float | None, float, bool]:
    """A lone request's TTFT (batch 1; else None), the decode step, whether on the fast path."""
    costs, drafts = calibration.costs, calibration.draft_tokens
    ttft = lone_ttft_s(costs, prompt) if batch == 1 else None
    step = step_seconds(
        costs, prefill_tokens=0, cached_tokens=0, prefill_pairs=0, batch=batch,
        context=batch * (prompt + output // 2), draft_tokens=drafts,
    )  # fmt: skip
    return ttft, step, on_fast_path(costs, 0, batch, drafts)


def side_by_side(
    config: Configuration, calibration: Calibration, results: Results
) -> list[SideBySide]:
    """Batch 1 and `maxNumSeqs` for a configuration a GB300 built-in prices; [] for the others."""
    served = [r for r in results.requests if r.prompt_tokens and r.error is None]
    if NAME.match(calibration.name) is None or calibration.gpus is None or not served:
        return []
    prompt = round(statistics.mean(r.prompt_tokens or 0 for r in served))
    output = max(round(statistics.mean(r.output_tokens for r in served)), 2)
    rows = []
    tokens = 1 + calibration.acceptance
    for batch in sorted({1, config.max_num_seqs}):
        ttft, step, fast = _plan_point(calibration, batch, prompt, output)
        ours = SideBySide(batch, prompt, output, ttft, step, step / tokens, fast, None, None, None)
        try:
            model = gb300_model(calibration.gpus, calibration.draft_tokens)
            theirs = model.estimate(batch, prompt, output, tokens_per_step=tokens)
            their_step = model.decode_step_s(batch, prompt + output // 2)
        except DataUnavailable as error:
            rows.append(replace(ours, unavailable=str(error)))
            continue
        rows.append(
            replace(
                ours,
                aiconfigurator_ttft_s=theirs.ttft_s,
                aiconfigurator_step_s=their_step,
                aiconfigurator_tpot_s=theirs.tpot_s,
            )
        )
    return rows
