"""Cold start: what vLLM 0.33.0's specialized decode compiles before a pod serves, timed on the CPU.

``SpecializedDecode.build_providers`` (and ``prepare_kv``) compile every CuTe DSL kernel on each
pod start. This script counts, from vLLM's own policy tables, the distinct compiles of the sites
whose compile keys do not need the checkpoint or a GPU, compiles each for ``--arch`` (sm_103a,
GB300) from fake tensors, and times it (wall and process CPU time; the machine may be shared):

  splitk_gemm      ``gemm.projection.compile_projection``: one per distinct (tactic, output
                   dtype) over the attention input projections (``projection_policies``), the
                   dense MLP (``PreparedDenseMLP``'s tiles) and the MoE shared-expert front
                   (``SHARED_TACTICS``); code-only, shared by all layers
  attn_res         ``attn_res.prepared.compile_consumer``: one sample per variant (plain, ring,
                   aux, ring + aux); the count needs the checkpoint's AttnRes block layout
  dense_activation ``moe.dense._compile_activation``: one per TP (hidden 4224 / 2112)
  kimi_mla_decode  this repository's kernels (4 split configs + combine), for scale

Not compiled here (their keys or compile calls need the checkpoint's weights or a CUDA device:
``torch.accelerator.device_index``, SM counts, multicast mailboxes): MLA query/value (per
prepared (batch, q); DCP value), KDA (per batch and verify shape), o-projection producer/
consumer/fused, MoE route/publish/shared/down/experts/group/plan/tail/push and the small-batch
chain, the L2 prefetch kernel, the embedding gather and the skinny B1/B2 GEMM. ``missing`` in
the JSON lists them.

    .venv/bin/python benchmarks/vllm_compile_cost.py [--arch sm_103a] [--tp 8 16]

Prints a table and writes ``benchmarks/results/vllm_compile_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "kernels"))

MLA_PITCH = 6288  # fused_qkv_a_g_proj rows (replicated: the same at TP 8 and 16)
KDA_PITCH = {8: 6432, 16: 3216}  # in_proj_qkvgfab rows per rank
DENSE_HIDDEN = {8: 4224, 16: 2112}  # dense MLP intermediate per rank (TP16 pads 2112 -> 2176)
SHARED = {8: 768, 16: 384}  # shared-expert intermediate per rank (SHARED_TACTICS keys)
DSPARK_Q = 8  # 1 + 7 draft tokens
MISSING = (
    "mla.prepared.compile_core (MlaQuery + MlaValue per prepared (batch, q); DcpValue under DCP)",
    "kda.prepared.executable (per batch and verify shape)",
    "oproj.prepared.compile_oproj (producer / consumer / fused per batch)",
    "moe.front.compile_route / compile_publish",
    "moe.shared.compile_shared / compile_down",
    "moe.experts_runtime.compile_experts / compile_group / compile_plan",
    "moe.tail_runtime.compile_tail / compile_push",
    "moe.small_batch chain and front_tp16 probe",
    "common.prefetch L2 prefetch kernel",
    "common.embedding.compile_gather",
    "skinny B1/B2 GEMM (vllm.model_executor.kernels.linear.cute_dsl.skinny_gemm)",
)


def batches(q: int) -> tuple[int, ...]:
    """``SpecializedDecode.batches``: BATCHES plus verify steps rounded to whole requests
    (capture sizes of a <= 64-token decode batch)."""
    from vllm.models.kimi_k3.nvidia.specialized_decode.runtime.providers import (  # noqa: PLC0415
        BATCHES,
        PREPARED_MAX,
    )

    verify = {-(-s // q) * q for s in range(1, PREPARED_MAX + 1)} if q > 1 else set()
    return tuple(sorted({*BATCHES, *(m for m in verify if m <= PREPARED_MAX)}))


def splitk_keys(tp: int, q: int) -> set[tuple[tuple[int, ...], str]]:
    """Distinct (tactic, output dtype) SplitK GEMM compiles of one TP rank."""
    from vllm.models.kimi_k3.nvidia.specialized_decode.cutedsl.common.policy import (  # noqa: PLC0415
        batch_table,
    )
    from vllm.models.kimi_k3.nvidia.specialized_decode.cutedsl.moe.front import (  # noqa: PLC0415
        SHARED_TACTICS,
    )
    from vllm.models.kimi_k3.nvidia.specialized_decode.runtime.providers import (  # noqa: PLC0415
        projection_policies,
    )

    sizes = batches(q)
    keys = set()
    for pitch in (MLA_PITCH, KDA_PITCH[tp]):
        keys |= {(t, "bf16") for t in projection_policies(tp, pitch, sizes).values()}
    tile = {b: next(n for n in (8, 16, 32, 64) if b <= n) for b in sizes}
    up = {8: (64, 8, 4, 8), 16: (64, 16, 2, 8), 32: (64, 32, 2, 8), 64: (64, 64, 2, 5)}
    down = {8: (128, 8, 1, 6), 16: (128, 16, 1, 6), 32: (128, 32, 1, 5), 64: (64, 64, 1, 5)}
    keys |= {(up[n], "bf16") for n in tile.values()} | {(down[n], "bf16") for n in tile.values()}
    gate_up, shared_down = map(batch_table, SHARED_TACTICS[SHARED[tp]])
    keys |= {(gate_up[b], "f32") for b in sizes} | {(shared_down[b], "bf16") for b in sizes}
    return keys


def timed(fn: Callable[[], Any]) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}


def compile_all(arch: str, tps: list[int]) -> dict[str, Any]:
    import torch  # noqa: PLC0415
    from vllm.models.kimi_k3.nvidia.specialized_decode.cutedsl.attn_res.prepared import (  # noqa: PLC0415
        compile_consumer,
    )
    from vllm.models.kimi_k3.nvidia.specialized_decode.cutedsl.gemm.projection import (  # noqa: PLC0415
        compile_projection,
    )
    from vllm.models.kimi_k3.nvidia.specialized_decode.cutedsl.moe.dense import (  # noqa: PLC0415
        _compile_activation,
    )

    from kimi_kernels.mla_decode.config import DISPATCH_CONFIGS  # noqa: PLC0415
    from kimi_kernels.mla_decode.interface import compile_combine, compile_split  # noqa: PLC0415

    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
    configs = {
        f"tp{tp}{'' if q == 1 else '_dspark7'}": (tp, q) for tp in tps for q in (1, DSPARK_Q)
    }
    keys = {name: splitk_keys(tp, q) for name, (tp, q) in configs.items()}
    compiles: list[dict[str, Any]] = []
    for tactic, dtype in sorted(set().union(*keys.values())):
        entry = timed(lambda t=tactic, d=dtype: compile_projection(t, dtypes[d], arch))
        compiles.append({"site": "splitk_gemm", "key": [list(tactic), dtype]} | entry)
        print(f"splitk_gemm {tactic} {dtype}: {entry}", flush=True)
    variants = {"plain": (0, 0, False), "ring": (8, 64, False), "aux": (0, 0, True)}
    variants["ring_aux"] = (8, 64, True)
    for name, (slots, cap, aux) in variants.items():
        entry = timed(
            lambda s=slots, c=cap, a=aux: compile_consumer(3, True, -1, False, s, c, arch, a)
        )
        compiles.append({"site": "attn_res", "key": name} | entry)
        print(f"attn_res {name}: {entry}", flush=True)
    for tp in tps:
        hidden = DENSE_HIDDEN[tp]
        padded = -(-hidden // 128) * 128
        entry = timed(lambda h=hidden, p=padded: _compile_activation(h, p, arch))
        compiles.append({"site": "dense_activation", "key": f"tp{tp}"} | entry)
    for config in DISPATCH_CONFIGS:
        entry = timed(lambda c=config: compile_split(c, arch))
        compiles.append({"site": "kimi_mla_decode", "key": str(config)} | entry)
    entry = timed(lambda: compile_combine(arch))
    compiles.append({"site": "kimi_mla_decode", "key": "combine"} | entry)
    per_config = {}
    for name, (tp, _) in configs.items():
        splitk = [c for c in compiles if c["site"] == "splitk_gemm"]
        mine = [c for c in splitk if (tuple(c["key"][0]), c["key"][1]) in keys[name]]
        dense = [c for c in compiles if c["site"] == "dense_activation" and c["key"] == f"tp{tp}"]
        per_config[name] = {
            "batches": list(batches(configs[name][1])),
            "splitk_gemm_compiles": len(mine),
            "counted_cpu_s": sum(c["cpu_s"] for c in mine + dense),
            "counted_wall_s": sum(c["wall_s"] for c in mine + dense),
        }
    return {"compiles": compiles, "configs": per_config}


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'site':18} {'compiles':>8} {'cpu s (median)':>14} {'cpu s (sum)':>11} {'wall s':>8}"
    ]
    sites: dict[str, list[dict[str, Any]]] = {}
    for c in result["compiles"]:
        sites.setdefault(c["site"], []).append(c)
    for site, rows in sites.items():
        cpu = sorted(r["cpu_s"] for r in rows)
        lines.append(
            f"{site:18} {len(rows):>8} {cpu[len(cpu) // 2]:>14.2f} {sum(cpu):>11.1f} "
            f"{sum(r['wall_s'] for r in rows):>8.1f}"
        )
    lines.append(f"{'config':16} {'batches':>7} {'splitk compiles':>15} {'cpu s':>7} {'wall s':>7}")
    for name, c in result["configs"].items():
        lines.append(
            f"{name:16} {len(c['batches']):>7} {c['splitk_gemm_compiles']:>15} "
            f"{c['counted_cpu_s']:>7.1f} {c['counted_wall_s']:>7.1f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="sm_103a", choices=["sm_90a", "sm_100a", "sm_103a"])
    parser.add_argument("--tp", type=int, nargs="+", default=[8, 16], choices=[8, 16])
    args = parser.parse_args()
    start = {"wall": time.perf_counter(), "cpu": time.process_time()}
    import vllm  # noqa: PLC0415

    imported = {
        "import_wall_s": time.perf_counter() - start["wall"],
        "import_cpu_s": time.process_time() - start["cpu"],
    }
    result = compile_all(args.arch, args.tp)
    result |= imported | {
        "arch": args.arch,
        "vllm": vllm.__version__,
        "host": platform.node(),
        "cpus": __import__("os").cpu_count(),
        "missing": list(MISSING),
    }
    out = ROOT / "benchmarks" / "results" / "vllm_compile_cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(table(result))
    print(
        f"vllm import: {imported['import_wall_s']:.1f} s wall, {imported['import_cpu_s']:.1f} s CPU"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
