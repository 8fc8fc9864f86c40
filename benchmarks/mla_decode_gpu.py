"""One-shot GPU check of ``kimi_kernels.mla_decode`` (correctness, then timing), for an H200.

Run from the repository root on a machine with an NVIDIA GPU and the CuTe DSL importable:

    PYTHONPATH=kernels python3 benchmarks/mla_decode_gpu.py [--budget-s 240]

Each phase runs in its own process (a sticky CUDA error cannot poison the next), under its share
of the budget, and writes ``$OUT/phase-<name>.json``; the parent merges them into one
``$OUT/mla_decode_gpu.json`` with a ``verdict`` and prints a table. The default budget (240 s)
plus machine start and the two DSL unpack runs fits half of a 15-minute device lease.

Phases:
  env          GPU, torch, DSL versions
  correctness  needle inputs (q x 2, keys that dominate chosen rows planted at split edges, a
               middle page, and one past each draft token's causal limit), shuffled pages, NaN-
               poisoned outputs; every head count (6, 12, 96), q_len 1..8, s_k up to 128K, FP8
               (bf16 on a subset), forced split counts, a caller-owned workspace; NaN in masked
               cache rows; DCP shards; bad lengths refused. Pass: ``check.verdict`` (per-row
               relative L2 <= 1e-2, LSE within 1e-3), proven on the CPU to fail a missing rescale,
               a wrong combine weighting and errors touching a few positions at 128K
               (tests/kimi_kernels/mla_decode/test_check.py).
  floors       this GPU's copy bandwidth and bf16 matmul rate (H200 figures on an H200)
  timing       CUDA graphs of 8 to 64 launches, each on its own copy of the cache (together
               > 4x the 50 MB L2 but at 1K positions x batch 1), replayed ``REPLAYS`` times
               per event pair; bytes the kernel really moves (the cache once per row group, the
               partials written and read back) next to the unique bytes of the floor
  splits       time per split count on three shapes (data to fit the split heuristic)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "kernels"))

SCALE = 1.0 / math.sqrt(192.0)
KV_SCALE = 0.5
SEQ_LENS = (1, 63, 64, 65, 1000, 8192, 131072)
L2_BYTES = 50 << 20  # H200
ROTATE = 8  # launches per graph, each on its own cache copy
REPLAYS = 20  # graph replays per event pair
# Share of the budget per phase (each a process with its own compiles).
PHASES = {"env": 0.08, "correctness": 0.42, "floors": 0.08, "timing": 0.30, "splits": 0.12}
OUT_DIR = Path(os.environ.get("OUT", "."))
DEVICE = "cuda"  # the correctness checks' inputs (the CPU tests run their glue on "cpu")


def phase_env() -> dict[str, Any]:
    import importlib.metadata  # noqa: PLC0415

    import cutlass  # noqa: PLC0415
    import torch  # noqa: PLC0415

    props = torch.cuda.get_device_properties(0)
    try:
        dsl = importlib.metadata.version("nvidia-cutlass-dsl")
    except importlib.metadata.PackageNotFoundError:  # unpacked onto PYTHONPATH
        dsl = getattr(cutlass, "__version__", "unknown")
    return {
        "gpu": props.name,
        "capability": list(torch.cuda.get_device_capability(0)),
        "sms": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cutlass_dsl": dsl,
    }


def poison() -> None:
    """Freed NaN-filled memory in both caching-allocator pools: the next torch.empty is NaN."""
    import torch  # noqa: PLC0415

    small = [torch.full((1 << 18,), float("nan"), device="cuda") for _ in range(32)]
    large = torch.full((256 << 20,), float("nan"), device="cuda")
    del small, large


Case = tuple[int, int, list[int], str, int | None]  # heads, q_len, seq_lens, kv dtype, splits


def correctness_cases() -> list[Case]:
    import torch  # noqa: PLC0415

    from kimi_kernels.mla_decode.config import SUPPORTED_HEADS  # noqa: PLC0415

    rng = torch.Generator().manual_seed(1234)
    cases: list[Case] = []
    for s_k in SEQ_LENS:
        for heads in SUPPORTED_HEADS:
            for q_len in range(1, 9):
                if q_len > s_k:
                    continue
                lens = [s_k]
                if s_k <= 8192:  # three requests of different lengths
                    lens += torch.randint(q_len, s_k + 1, (2,), generator=rng).tolist()
                cases.append((heads, q_len, lens, "fp8_e4m3", None))
    for heads, q_len in ((6, 1), (12, 8)):
        for s_k in (65, 1000):
            cases.append((heads, q_len, [s_k, q_len], "bf16", None))
    for splits in (1, 7, 64, 128):
        cases.append((12, 8, [8192, 1000], "fp8_e4m3", splits))
        cases.append((6, 3, [65, 200], "fp8_e4m3", splits))
    return cases


def check_case(gen: Any, case: Case) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    from kimi_kernels.mla_decode import mla_decode, mla_decode_reference  # noqa: PLC0415
    from kimi_kernels.mla_decode.check import (  # noqa: PLC0415
        make_inputs,
        needle_positions,
        plant_needles,
        verdict,
    )
    from kimi_kernels.mla_decode.config import (  # noqa: PLC0415
        choose_config,
        choose_num_splits,
        workspace_floats,
    )

    heads, q_len, lens, kv_name, forced = case
    kv_dtype = torch.float8_e4m3fn if kv_name == "fp8_e4m3" else torch.bfloat16
    inputs = make_inputs(gen, heads, q_len, lens, kv_dtype, q_scale=2.0, device=DEVICE)
    q, kv, table, _ = inputs
    rows = heads * q_len
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = forced or choose_num_splits(
        len(lens), rows, max(lens), choose_config(kv_name, rows), sms
    )
    for b, n in enumerate(lens):
        pairs = needle_positions(n, q_len, splits)
        plant_needles(gen, q, kv, table, b, pairs, (SCALE, KV_SCALE))
    poison()
    workspace = torch.empty(workspace_floats(len(lens), rows, splits), device=DEVICE)
    out, lse = mla_decode(*inputs, SCALE, KV_SCALE, num_splits=splits, workspace=workspace)
    torch.cuda.synchronize()
    ref = mla_decode_reference(*inputs, SCALE, KV_SCALE)
    case_info = {"heads": heads, "q_len": q_len, "seq_lens": lens, "kv": kv_name, "splits": splits}
    return case_info | verdict(out, lse, *ref)


def check_masked_nan(gen: Any) -> dict[str, Any]:
    """NaN in the last cache row: only the last draft token sees it; the others stay right."""
    import torch  # noqa: PLC0415

    from kimi_kernels.mla_decode import mla_decode, mla_decode_reference  # noqa: PLC0415
    from kimi_kernels.mla_decode.check import make_inputs, verdict  # noqa: PLC0415

    q, kv, table, lens = make_inputs(gen, 12, 8, [1000], torch.float8_e4m3fn, device=DEVICE)
    kv[int(table[0, 999 // 64]), 999 % 64] = float("nan")
    out, lse = mla_decode(q, kv, table, lens, SCALE, KV_SCALE, num_splits=4)
    ref_out, ref_lse = mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE)
    return {"case": "masked NaN row"} | verdict(
        out[:, :7], lse[:, :7], ref_out[:, :7], ref_lse[:, :7]
    )


def check_dcp(gen: Any) -> dict[str, Any]:
    """A DCP rank's shard with draft tokens (global causal limits) against the reference."""
    import torch  # noqa: PLC0415

    from kimi_kernels.mla_decode import mla_decode, mla_decode_reference  # noqa: PLC0415
    from kimi_kernels.mla_decode.check import make_inputs, verdict  # noqa: PLC0415
    from kimi_kernels.mla_decode.config import local_count  # noqa: PLC0415

    world, rank, interleave, total = 16, 5, 64, 70_000
    local = local_count(total, world, rank, interleave)
    q, kv, table, lens = make_inputs(gen, 96, 8, [local], torch.float8_e4m3fn, device=DEVICE)
    totals = torch.tensor([total], dtype=torch.int32, device=DEVICE)
    dcp = (world, rank, interleave)
    out, lse = mla_decode(q, kv, table, lens, SCALE, KV_SCALE, totals=totals, dcp=dcp)
    ref = mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE, totals=totals, dcp=dcp)
    return {"case": "dcp 16 ranks, interleave 64, rank 5"} | verdict(out, lse, *ref)


def check_refusal(gen: Any) -> dict[str, Any]:
    """A length past the block table is refused before any kernel reads out of range."""
    import torch  # noqa: PLC0415

    from kimi_kernels.mla_decode import mla_decode  # noqa: PLC0415
    from kimi_kernels.mla_decode.check import make_inputs  # noqa: PLC0415

    q, kv, table, lens = make_inputs(gen, 6, 1, [100], torch.float8_e4m3fn, device=DEVICE)
    try:
        mla_decode(q, kv, table, lens + 100, SCALE, KV_SCALE)
    except ValueError as exc:
        return {"case": "seq_len past the block table", "ok": True, "error": str(exc)}
    return {"case": "seq_len past the block table", "ok": False, "error": "not refused"}


def phase_correctness(deadline: float) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    seed = time.time_ns() % 2**31  # fresh inputs every run; recorded to replay a failure
    gen = torch.Generator(device="cuda").manual_seed(seed)
    results: list[dict[str, Any]] = []
    extra: list[Callable[[Any], dict[str, Any]]] = [check_masked_nan, check_dcp, check_refusal]
    checks = [*(lambda g, c=c: check_case(g, c) for c in correctness_cases()), *extra]
    for i, check in enumerate(checks):
        if time.monotonic() > deadline:
            results.append({"ok": False, "error": f"time budget reached after {i} checks"})
            break
        try:
            results.append(check(gen))
        except Exception:
            results.append({"ok": False, "error": traceback.format_exc(limit=6)})
    return {
        "seed": seed,
        "passed": sum(r["ok"] for r in results),
        "failed": sum(not r["ok"] for r in results),
        "cases": results,
    }


def event_us(fn: Callable[[], Any], reps: int, per_event: int, warmup: int = 3) -> float:
    """Median over ``reps`` event pairs of ``per_event`` calls each, per call."""
    import torch  # noqa: PLC0415

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_event):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per_event)
    return statistics.median(times)


def phase_floors() -> dict[str, Any]:
    import torch  # noqa: PLC0415

    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = event_us(lambda: dst.copy_(src), 10, 5)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_us = event_us(lambda: a @ a, 10, 5)
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,  # the floors are this GPU's figures
        "copy_gbps": 2 * n / copy_us / 1e3,  # read + write
        "matmul_bf16_tflops": 2 * 8192**3 / mm_us / 1e6,
    }


def graph_of(fns: list[Callable[[], Any]]) -> Any:
    import torch  # noqa: PLC0415

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()  # warm-up (compiles) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    return graph


def time_shape(
    shape: tuple[int, int, int, int], floors: dict[str, Any], splits: int | None
) -> dict[str, Any]:
    """Per-launch time of ``ROTATE`` launches on distinct cache copies, replayed together."""
    import torch  # noqa: PLC0415

    from kimi_kernels.mla_decode import mla_decode  # noqa: PLC0415
    from kimi_kernels.mla_decode.check import make_inputs  # noqa: PLC0415
    from kimi_kernels.mla_decode.config import (  # noqa: PLC0415
        HEAD_DIM,
        V_DIM,
        choose_config,
        choose_num_splits,
        row_groups,
        workspace_floats,
    )

    heads, q_len, batch, s_k = shape
    rows = heads * q_len
    config = choose_config("fp8_e4m3", rows)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = splits or choose_num_splits(batch, rows, s_k, config, sms)
    unique = batch * (s_k * HEAD_DIM + rows * HEAD_DIM * 2 + rows * V_DIM * 2)
    copies = max(ROTATE, math.ceil(4 * L2_BYTES / (batch * s_k * HEAD_DIM)))
    copies = min(copies, 64)
    gen = torch.Generator(device="cuda").manual_seed(s_k + heads)
    inputs = [
        make_inputs(gen, heads, q_len, [s_k] * batch, torch.float8_e4m3fn, device="cuda")
        for _ in range(copies)
    ]
    workspace = torch.empty(workspace_floats(batch, rows, splits), device="cuda")

    def launch(i: int) -> Callable[[], Any]:
        return lambda: mla_decode(
            *inputs[i], SCALE, KV_SCALE, num_splits=splits, workspace=workspace,
            check_lengths=False,
        )  # fmt: skip

    graph = graph_of([launch(i) for i in range(copies)])
    us = event_us(graph.replay, 5, REPLAYS) / copies
    moved = batch * row_groups(rows, config) * s_k * HEAD_DIM  # the cache, per row group
    moved += batch * rows * (HEAD_DIM * 2 + V_DIM * 2)  # q in, out
    moved += 2 * workspace_floats(batch, rows, splits) * 4  # partials written, read back
    flops = 2 * batch * rows * s_k * (HEAD_DIM + V_DIM)
    floor_bytes_us = unique / (floors["copy_gbps"] * 1e3)
    floor_flops_us = flops / (floors["matmul_bf16_tflops"] * 1e6)
    floor = max(floor_bytes_us, floor_flops_us)
    return {
        "heads": heads, "q_len": q_len, "batch": batch, "s_k": s_k, "splits": splits,
        "cache_copies": copies, "us": us, "moved_gbps": moved / us / 1e3,
        "moved_bytes": moved, "unique_bytes": unique, "tflops": flops / us / 1e6,
        "floor_us": floor, "floor_bytes_us": floor_bytes_us, "floor_flops_us": floor_flops_us,
        "floors_gpu": floors["gpu"], "x_floor": us / floor,
    }  # fmt: skip


def timing_shapes() -> list[tuple[int, int, int, int]]:
    shapes = [
        (heads, 8, batch, s_k)
        for heads in (6, 12)
        for batch in (1, 8)
        for s_k in (1024, 8192, 32768, 131072)
    ]
    return [*shapes, (96, 8, 1, 8192), (96, 8, 1, 131072), (6, 1, 8, 8192), (6, 1, 8, 131072)]


def phase_timing(deadline: float, floors: dict[str, Any]) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    for shape in timing_shapes():
        if time.monotonic() > deadline:
            results.append({"error": "time budget reached"})
            break
        try:
            results.append(time_shape(shape, floors, None))
        except Exception:
            results.append({"shape": list(shape), "error": traceback.format_exc(limit=4)})
    return {"shapes": results}


def phase_splits(deadline: float, floors: dict[str, Any]) -> dict[str, Any]:
    sweep: dict[str, Any] = {}
    for shape in ((12, 8, 1, 32768), (12, 8, 1, 131072), (6, 1, 8, 8192)):
        key = "h{}_q{}_b{}_s{}".format(*shape)
        sweep[key] = {}
        for splits in (1, 2, 4, 8, 16, 32, 64, 128):
            if time.monotonic() > deadline:
                return sweep
            try:
                sweep[key][splits] = time_shape(shape, floors, splits)["us"]
            except Exception:
                sweep[key][splits] = traceback.format_exc(limit=2)
    return sweep


def run_phase(name: str, seconds: float) -> dict[str, Any]:
    """The phase's result, computed in this process (the child side of ``--phase``)."""
    deadline = time.monotonic() + seconds
    if name == "env":
        return phase_env()
    if name == "correctness":
        return phase_correctness(deadline)
    if name == "floors":
        return phase_floors()
    floors = json.loads((OUT_DIR / "phase-floors.json").read_text())
    if name == "timing":
        return phase_timing(deadline, floors)
    return phase_splits(deadline, floors)


def spawn(name: str, seconds: float) -> dict[str, Any]:
    """Run one phase in a child process; a crash, a hang or a sticky CUDA error stays there."""
    path = OUT_DIR / f"phase-{name}.json"
    path.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--phase", name, "--seconds", str(seconds)]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=seconds + 30, check=False
        )
        tail = (proc.stdout + proc.stderr)[-3000:]
        rc: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        tail, rc = "", "timeout"
    result: dict[str, Any] = {"seconds": round(time.monotonic() - start, 1), "rc": rc}
    if path.exists():
        result["result"] = json.loads(path.read_text())
    else:
        result["error"] = tail or "no result"
    return result


def overall(phases: dict[str, Any]) -> dict[str, Any]:
    """One verdict: every phase ran and every correctness check passed."""
    correctness = phases.get("correctness", {}).get("result", {})
    missing = [name for name, p in phases.items() if "result" not in p]
    return {
        "ok": not missing and correctness.get("failed", 1) == 0,
        "phases_without_result": missing,
        "correctness_passed": correctness.get("passed", 0),
        "correctness_failed": correctness.get("failed", 0),
    }


def table(result: dict[str, Any]) -> str:
    phases = result["phases"]
    v = result["verdict"]
    lines = [
        f"verdict: {'PASS' if v['ok'] else 'FAIL'} (correctness {v['correctness_passed']} passed, "
        f"{v['correctness_failed']} failed; phases without result: {v['phases_without_result']})"
    ]
    for r in phases.get("correctness", {}).get("result", {}).get("cases", []):
        if not r["ok"]:
            lines.append(f"  FAIL {json.dumps(r)[:300]}")
    for name, p in phases.items():
        if "error" in p:
            lines.append(f"  {name}: rc {p['rc']}: {p['error'].strip().splitlines()[-1:]}")
    floors = phases.get("floors", {}).get("result")
    if floors:
        lines.append(
            f"floors ({floors['gpu']}): copy {floors['copy_gbps']:.0f} GB/s, "
            f"bf16 matmul {floors['matmul_bf16_tflops']:.0f} TFLOP/s"
        )
    lines.append(
        f"{'H':>3} {'Lq':>2} {'B':>2} {'s_k':>7} {'splits':>6} {'us':>9} {'moved GB/s':>10} "
        f"{'TFLOP/s':>7} {'floor us':>9} {'x floor':>7}"
    )
    for r in phases.get("timing", {}).get("result", {}).get("shapes", []):
        if "error" in r:
            lines.append(f"  {r.get('shape', '')}: ERROR {r['error'].strip().splitlines()[-1]}")
            continue
        lines.append(
            f"{r['heads']:>3} {r['q_len']:>2} {r['batch']:>2} {r['s_k']:>7} {r['splits']:>6} "
            f"{r['us']:>9.1f} {r['moved_gbps']:>10.0f} {r['tflops']:>7.2f} "
            f"{r['floor_us']:>9.1f} {r['x_floor']:>7.1f}"
        )
    for key, times in phases.get("splits", {}).get("result", {}).items():
        cells = " ".join(
            f"{s}:{t:.0f}" if isinstance(t, float) else f"{s}:ERR" for s, t in times.items()
        )
        lines.append(f"split sweep {key} (us): {cells}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-s", type=float, default=240.0, help="all phases together")
    parser.add_argument("--phase", choices=sorted(PHASES), help="(internal) run one phase")
    parser.add_argument("--seconds", type=float, default=60.0, help="(internal) its share")
    args = parser.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    if args.phase:
        result = run_phase(args.phase, args.seconds)
        (OUT_DIR / f"phase-{args.phase}.json").write_text(json.dumps(result, indent=1))
        return 0
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        print("mla_decode_gpu: no NVIDIA GPU found", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    phases: dict[str, Any] = {}
    for name, share in PHASES.items():
        if name in ("timing", "splits") and "result" not in phases.get("floors", {}):
            continue  # no floors: nothing to time against
        phases[name] = spawn(name, share * args.budget_s)
        print(f"[{time.monotonic() - t0:6.1f}s] {name}: rc {phases[name]['rc']}", flush=True)
    result = {"phases": phases, "verdict": overall(phases)}
    (OUT_DIR / "mla_decode_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    print(table(result))
    print(f"wrote {OUT_DIR / 'mla_decode_gpu.json'}")
    return 0 if result["verdict"]["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
