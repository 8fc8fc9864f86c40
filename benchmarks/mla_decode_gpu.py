"""One-shot GPU check of ``kimi_kernels.mla_decode`` (correctness, then timing), for the H200.

Run from the repository root on a machine with an NVIDIA GPU and the CuTe DSL importable:

    PYTHONPATH=kernels python3 benchmarks/mla_decode_gpu.py [--budget-s 420]

Phases (each writes ``$OUT/mla_decode_gpu.json`` again, so a timeout still leaves data):
  env         GPU, torch, DSL versions
  preflight   ``kimi_kernels.preflight`` facts and problems (an H200 fails only the GPU-family
              check)
  correctness fresh random inputs per case, shuffled page tables, outputs and workspace poisoned
              with NaN through the caching allocator; every head count (6, 12, 96), q_len 1..8,
              s_k in {1, 63, 64, 65, 1000, 8192, 131072}, FP8 cache (bf16 on a subset), forced
              split counts on a subset; compared with ``mla_decode_reference`` on the same GPU
  floors      measured copy bandwidth and bf16 matmul rate
  timing      CUDA graph replays timed with events (median); µs, GB/s, TFLOP/s, the two floors,
              an empty split+combine launch pair with the same grids replayed the same way, and the
              torch reference (eager, events)
  splits      time per split count on a few shapes (data to fit the split heuristic)
The short table is printed last.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cutlass
import torch
from cuda.bindings import driver as cuda
from cutlass import cute

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "kernels"))

from kimi_kernels.mla_decode import mla_decode, mla_decode_reference  # noqa: E402
from kimi_kernels.mla_decode.config import (  # noqa: E402
    HEAD_DIM,
    PAGE_SIZE,
    SUPPORTED_HEADS,
    V_DIM,
    choose_config,
    choose_num_splits,
    row_groups,
)

SCALE = 1.0 / math.sqrt(192.0)
KV_SCALE = 0.5
SEQ_LENS = (1, 63, 64, 65, 1000, 8192, 131072)
OUT_ATOL = OUT_RTOL = 2e-2  # bf16 output
LSE_ATOL = 1e-3
RESULT: dict[str, Any] = {}
OUT_DIR = Path(os.environ.get("OUT", "."))


def save() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "mla_decode_gpu.json").write_text(json.dumps(RESULT, indent=1, default=str))


def make_inputs(
    gen: torch.Generator, heads: int, q_len: int, seq_lens: list[int], kv_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresh device inputs; each request's pages drawn at random from one shuffled pool."""
    pages = [-(-n // PAGE_SIZE) for n in seq_lens]
    num_blocks = sum(pages) + 7
    order = torch.randperm(num_blocks, generator=gen, device="cuda").to(torch.int32)
    table = torch.zeros(len(seq_lens), max(pages), dtype=torch.int32, device="cuda")
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used : used + n]
        used += n
    kv = torch.randn(num_blocks, PAGE_SIZE, HEAD_DIM, generator=gen, device="cuda").to(kv_dtype)
    q = torch.randn(len(seq_lens), q_len, heads, HEAD_DIM, generator=gen, device="cuda")
    lens = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
    return q.to(torch.bfloat16), kv, table, lens


def poison() -> None:
    """Freed NaN-filled memory in both of the caching allocator's pools (requests up to 1 MiB
    come from small segments, bigger ones from large): the next torch.empty calls (outputs,
    partials) hand back NaN."""
    small = [torch.full((1 << 18,), float("nan"), device="cuda") for _ in range(32)]  # 1 MiB each
    large = torch.full((256 << 20,), float("nan"), device="cuda")
    del small, large


def phase_env() -> None:
    props = torch.cuda.get_device_properties(0)
    try:
        dsl = importlib.metadata.version("nvidia-cutlass-dsl")
    except importlib.metadata.PackageNotFoundError:  # unpacked onto PYTHONPATH (kernels/NOTES.md)
        dsl = getattr(cutlass, "__version__", "unknown")
    RESULT["env"] = {
        "gpu": props.name,
        "capability": list(torch.cuda.get_device_capability(0)),
        "sms": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cutlass_dsl": dsl,
    }


def phase_preflight() -> None:
    from kimi_kernels.preflight.checks import evaluate, report  # noqa: PLC0415
    from kimi_kernels.preflight.probe import gather  # noqa: PLC0415

    facts = gather(expect_imex=False, run_kernels=True)
    RESULT["preflight"] = report(facts, evaluate(facts))


def first_call_diagnosis() -> dict[str, Any]:
    """If the AOT (fake-tensor) compiled kernel cannot be called, say whether compiling from the
    real tensors works: the fix is then in how interface.py builds its fake tensors."""
    from kimi_kernels.mla_decode.interface import device_arch, to_cute  # noqa: PLC0415
    from kimi_kernels.mla_decode.kernel import MLADecodeSplitKV  # noqa: PLC0415

    gen = torch.Generator(device="cuda").manual_seed(0)
    q, kv, table, lens = make_inputs(gen, 6, 2, [70], torch.float8_e4m3fn)
    config = choose_config("fp8_e4m3", 12)
    o_part = torch.zeros(1, 2, 12, V_DIM, device="cuda")
    lse_part = torch.zeros(1, 2, 12, device="cuda")
    args = [to_cute(t) for t in (q, kv, table, lens, o_part, lse_part)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    try:
        fn = cute.compile(
            MLADecodeSplitKV(config),
            *args,
            cutlass.Float32(SCALE),
            cutlass.Float32(KV_SCALE),
            stream,
            options=f"--gpu-arch {device_arch(q.device)}",
        )
        fn(*args, cutlass.Float32(SCALE), cutlass.Float32(KV_SCALE), stream)
        torch.cuda.synchronize()
        return {"real_tensor_compile": "ok", "lse_part": lse_part.flatten().tolist()}
    except Exception:
        return {"real_tensor_compile": traceback.format_exc(limit=4)}


Case = tuple[int, int, list[int], torch.dtype, int | None]  # heads, q_len, seq_lens, kv, splits


def check_case(gen: torch.Generator, case: Case) -> dict[str, Any]:
    heads, q_len, seq_lens, kv_dtype, num_splits = case
    q, kv, table, lens = make_inputs(gen, heads, q_len, seq_lens, kv_dtype)
    poison()
    out, lse = mla_decode(q, kv, table, lens, SCALE, KV_SCALE, num_splits=num_splits)
    torch.cuda.synchronize()
    ref_out, ref_lse = mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE)
    out_err = (out.float() - ref_out).abs()
    allowed = OUT_ATOL + OUT_RTOL * ref_out.abs()
    lse_err = (lse - ref_lse).abs()
    nan = bool(torch.isnan(out).any() or torch.isnan(lse).any())
    ok = (not nan) and bool((out_err <= allowed).all()) and bool((lse_err <= LSE_ATOL).all())
    return {
        "heads": heads,
        "q_len": q_len,
        "seq_lens": seq_lens,
        "kv": str(kv_dtype).removeprefix("torch."),
        "num_splits": num_splits,
        "ok": ok,
        "nan": nan,
        "max_out_err": out_err.max().item(),
        "max_lse_err": lse_err.max().item(),
    }


def correctness_cases() -> list[Case]:
    rng = torch.Generator().manual_seed(1234)
    cases = []
    for s_k in SEQ_LENS:
        for heads in SUPPORTED_HEADS:
            for q_len in range(1, 9):
                if q_len > s_k:
                    continue
                if s_k <= 8192:  # three requests of different lengths
                    others = torch.randint(q_len, s_k + 1, (2,), generator=rng).tolist()
                    lens = [s_k, *others]
                else:
                    lens = [s_k]
                cases.append((heads, q_len, lens, torch.float8_e4m3fn, None))
    for heads, q_len in ((6, 1), (12, 8)):
        for s_k in (65, 1000):
            cases.append((heads, q_len, [s_k, q_len], torch.bfloat16, None))
    for splits in (1, 7, 64, 128):
        cases.append((12, 8, [8192, 1000], torch.float8_e4m3fn, splits))
        cases.append((6, 3, [65, 200], torch.float8_e4m3fn, splits))
    return cases


def phase_correctness(deadline: float) -> None:
    seed = time.time_ns() % 2**31  # fresh inputs every run; recorded to replay a failure
    gen = torch.Generator(device="cuda").manual_seed(seed)
    results: list[dict[str, Any]] = []
    RESULT["correctness"] = {"seed": seed, "cases": results}
    for i, case in enumerate(correctness_cases()):
        if time.monotonic() > deadline:
            RESULT["correctness"]["stopped"] = f"time budget reached after {i} cases"
            break
        try:
            results.append(check_case(gen, case))
        except Exception:
            heads, q_len, lens, kv_dtype, splits = case
            results.append(
                {
                    "heads": heads,
                    "q_len": q_len,
                    "seq_lens": lens,
                    "kv": str(kv_dtype),
                    "num_splits": splits,
                    "ok": False,
                    "error": traceback.format_exc(limit=6),
                }
            )
            if i == 0:
                RESULT["correctness"]["diagnosis"] = first_call_diagnosis()
                break
        if i % 20 == 0:
            save()
    RESULT["correctness"]["passed"] = sum(r["ok"] for r in results)
    RESULT["correctness"]["failed"] = sum(not r["ok"] for r in results)


def event_median_us(fn: Callable[[], Any], reps: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def graph_of(fn: Callable[[], Any]) -> torch.cuda.CUDAGraph:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up (compiles) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def phase_floors() -> None:
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = event_median_us(lambda: dst.copy_(src), 20)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_us = event_median_us(lambda: a @ a, 10)
    RESULT["floors"] = {
        "copy_gbps": 2 * n / copy_us / 1e3,  # read + write
        "matmul_bf16_tflops": 2 * 8192**3 / mm_us / 1e6,
    }


class EmptyPair:
    """Two empty CuTe kernels with the split and combine grids (128 threads each): the launch
    cost a decode step cannot go below when replayed the same way."""

    def __init__(self, grid_split: list[int], grid_combine: list[int]) -> None:
        self.grid_split = grid_split
        self.grid_combine = grid_combine

    @cute.jit
    def __call__(self, stream: cuda.CUstream) -> None:
        self.empty().launch(grid=self.grid_split, block=[128, 1, 1], stream=stream)
        self.empty().launch(grid=self.grid_combine, block=[128, 1, 1], stream=stream)

    @cute.kernel
    def empty(self) -> None:
        pass


def empty_pair(grid_split: list[int], grid_combine: list[int]) -> Callable[[], None]:
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    fn = cute.compile(EmptyPair(grid_split, grid_combine), stream)

    def launch() -> None:
        fn(cuda.CUstream(torch.cuda.current_stream().cuda_stream))

    return launch


def time_shape(
    shape: tuple[int, int, int, int], *, num_splits: int | None, with_ref: bool
) -> dict[str, Any]:
    heads, q_len, batch, s_k = shape
    gen = torch.Generator(device="cuda").manual_seed(s_k + heads)
    q, kv, table, lens = make_inputs(gen, heads, q_len, [s_k] * batch, torch.float8_e4m3fn)
    rows = heads * q_len
    config = choose_config("fp8_e4m3", rows)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = num_splits or choose_num_splits(batch, rows, s_k, config, sms)
    graph = graph_of(lambda: mla_decode(q, kv, table, lens, SCALE, KV_SCALE, num_splits=splits))
    us = event_median_us(graph.replay, 50)
    bytes_moved = batch * (s_k * HEAD_DIM + rows * HEAD_DIM * 2 + rows * V_DIM * 2)
    flops = 2 * batch * rows * s_k * (HEAD_DIM + V_DIM)
    floors = RESULT["floors"]
    floor_bw_us = bytes_moved / (floors["copy_gbps"] * 1e3)
    floor_flop_us = flops / (floors["matmul_bf16_tflops"] * 1e6)
    entry: dict[str, Any] = {
        "heads": heads,
        "q_len": q_len,
        "batch": batch,
        "s_k": s_k,
        "num_splits": splits,
        "us": us,
        "gbps": bytes_moved / us / 1e3,
        "tflops": flops / us / 1e6,
        "floor_us": max(floor_bw_us, floor_flop_us),
        "floor_bytes_us": floor_bw_us,
        "floor_flops_us": floor_flop_us,
    }
    entry["x_floor"] = us / entry["floor_us"]
    if num_splits is None:
        grid_split = [splits, row_groups(rows, config), batch]
        empty = graph_of(empty_pair(grid_split, [rows, batch, 1]))
        entry["empty_pair_us"] = event_median_us(empty.replay, 50)
        entry["x_empty_pair"] = us / entry["empty_pair_us"]
    if with_ref:
        ref_us = event_median_us(
            lambda: mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE), 3, warmup=1
        )
        entry["reference_us"] = ref_us
        entry["speedup_vs_reference"] = ref_us / us
    return entry


def phase_timing(deadline: float) -> None:
    shapes = [
        (heads, 8, batch, s_k)
        for heads in (6, 12)
        for batch in (1, 8)
        for s_k in (1024, 8192, 32768, 131072)
    ]
    shapes += [(96, 8, 1, s_k) for s_k in (8192, 131072)]
    shapes += [(6, 1, 8, s_k) for s_k in (8192, 131072)]
    results: list[dict[str, Any]] = []
    RESULT["timing"] = results
    for heads, q_len, batch, s_k in shapes:
        if time.monotonic() > deadline:
            RESULT["timing_stopped"] = "time budget reached"
            break
        try:
            results.append(
                time_shape((heads, q_len, batch, s_k), num_splits=None, with_ref=batch == 1)
            )
        except Exception:
            results.append({"heads": heads, "s_k": s_k, "error": traceback.format_exc(limit=4)})
        save()


def phase_splits(deadline: float) -> None:
    sweep: dict[str, Any] = {}
    RESULT["split_sweep"] = sweep
    for heads, q_len, batch, s_k in ((12, 8, 1, 32768), (12, 8, 1, 131072), (6, 1, 8, 8192)):
        key = f"h{heads}_q{q_len}_b{batch}_s{s_k}"
        sweep[key] = {}
        for splits in (1, 2, 4, 8, 16, 32, 64, 128):
            if time.monotonic() > deadline:
                return
            try:
                sweep[key][splits] = time_shape(
                    (heads, q_len, batch, s_k), num_splits=splits, with_ref=False
                )["us"]
            except Exception:
                sweep[key][splits] = traceback.format_exc(limit=2)
        save()


def table() -> str:
    lines = []
    c = RESULT.get("correctness", {})
    lines.append(f"correctness: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed")
    for r in c.get("cases", []):
        if not r["ok"]:
            lines.append(f"  FAIL {json.dumps(r)[:300]}")
    if "preflight" in RESULT:
        lines.append(f"preflight problems: {RESULT['preflight']['problems']}")
    if "floors" in RESULT:
        f = RESULT["floors"]
        lines.append(
            f"floors: copy {f['copy_gbps']:.0f} GB/s, "
            f"bf16 matmul {f['matmul_bf16_tflops']:.0f} TFLOP/s"
        )
    lines.append(
        f"{'H':>3} {'Lq':>2} {'B':>2} {'s_k':>7} {'splits':>6} {'us':>9} {'GB/s':>7} "
        f"{'TFLOP/s':>7} {'floor us':>9} {'x floor':>7} {'x empty':>7} {'x ref':>7}"
    )
    for r in RESULT.get("timing", []):
        if "error" in r:
            lines.append(f"{r['heads']:>3} s_k {r['s_k']}: ERROR {r['error'].splitlines()[-1]}")
            continue
        lines.append(
            f"{r['heads']:>3} {r['q_len']:>2} {r['batch']:>2} {r['s_k']:>7} {r['num_splits']:>6} "
            f"{r['us']:>9.1f} {r['gbps']:>7.0f} {r['tflops']:>7.2f} {r['floor_us']:>9.1f} "
            f"{r['x_floor']:>7.1f} {r.get('x_empty_pair', float('nan')):>7.1f} "
            f"{r.get('speedup_vs_reference', float('nan')):>7.1f}"
        )
    for key, times in RESULT.get("split_sweep", {}).items():
        cells = " ".join(
            f"{s}:{t:.0f}" if isinstance(t, float) else f"{s}:ERR" for s, t in times.items()
        )
        lines.append(f"split sweep {key} (us): {cells}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--budget-s", type=float, default=420.0, help="stop starting new work after"
    )
    args = parser.parse_args()
    t0 = time.monotonic()
    deadline = t0 + args.budget_s
    if not torch.cuda.is_available():
        print("mla_decode_gpu: no NVIDIA GPU found", file=sys.stderr)
        return 2
    phases: list[tuple[str, Callable[[], None]]] = [
        ("env", phase_env),
        ("preflight", phase_preflight),
        ("correctness", lambda: phase_correctness(t0 + 0.5 * args.budget_s)),
        ("floors", phase_floors),
        ("timing", lambda: phase_timing(t0 + 0.85 * args.budget_s)),
        ("splits", lambda: phase_splits(deadline)),
    ]
    RESULT["phase_seconds"] = {}
    for name, fn in phases:
        start = time.monotonic()
        try:
            fn()
        except Exception:
            RESULT.setdefault("errors", {})[name] = traceback.format_exc(limit=6)
        RESULT["phase_seconds"][name] = round(time.monotonic() - start, 1)
        save()
        print(f"[{time.monotonic() - t0:6.1f}s] {name} done", flush=True)
        if name == "correctness" and RESULT["correctness"].get("passed", 0) == 0:
            break  # nothing works: timing would only repeat the error
    print(table())
    print(f"wrote {OUT_DIR / 'mla_decode_gpu.json'}")
    ok = "errors" not in RESULT and RESULT.get("correctness", {}).get("failed", 1) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
