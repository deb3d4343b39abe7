"""The profile builder of the tests: synthetic profiles with known answers (timeline, launch queue, roofline,
report, diff, events cache, steps, engine classification).

`Synth` places kernels, ops, launches, copies and collectives on a timeline by hand (times in ns), so every
category, share and verdict of a test can be computed on paper. `decode_run` builds a small M3-like decode run
(prefill + N decode steps, a few layers, attention / MoE regions) with switches, for diff direction tests.

Shapes (bf16 on an H200, ridge 989.4 / 4.8 = 206 FLOP/byte):
    BIG   mm [4096,4096] x [4096,4096]: intensity 1365 FLOP/B -> compute-bound
    SKINNY mm [8,6144] x [6144,1536]:   intensity 7.9 FLOP/B  -> memory-bound
"""

from __future__ import annotations

import json

from mmprof.profiles.profile import ProfileBuilder

BF16 = "c10::BFloat16"
BIG = ("aten::mm", [[4096, 4096], [4096, 4096]], [BF16, BF16])
SKINNY = ("aten::mm", [[8, 6144], [6144, 1536]], [BF16, BF16])
ADD = ("aten::add", [[8, 6144], [8, 6144], []], [BF16, BF16, "Scalar"])


class Synth:
    """Hand-placed profile builder. `device` is a device dict for every rank (None: no device info)."""

    def __init__(self, ranks: int = 1, device: dict | None = None, source: str = "synthetic"):
        device = {"index": 0, "name": "NVIDIA H200", "vendor": "nvidia"} if device is None else device
        self.b = ProfileBuilder({"source": {"format": source, "files": []},
                                 "ranks": [{"rank": r, "devices": [dict(device)] if device else []} for r in range(ranks)],
                                 "clock": {"unit": "ns"}})
        self.corr = 0

    def op(self, spec: tuple | None, start: int, dur: int, rank: int = 0, tid: int = 1, scope: str | None = None,
           phase: str | None = None, step: int = -1, parent: int = -1, name: str | None = None) -> int:
        nm, dims, types = spec if spec else (name, None, None)
        return self.b.row("ops", rank=rank, tid=tid, start_ns=start, dur_ns=dur, name=nm,
                          input_dims=None if dims is None else json.dumps(dims),
                          input_types=None if types is None else json.dumps(types), parent=parent,
                          scope=scope, phase=phase, step=step)

    def kernel(self, name: str, start: int, dur: int, rank: int = 0, stream: int = 7, op: tuple | int | None = None,
               scope: str | None = None, phase: str | None = None, step: int = -1, launch_at: int | None = None,
               launch_dur: int = 2000) -> int:
        self.corr += 1
        op_idx = op if isinstance(op, int) else -1
        if isinstance(op, tuple):
            at = launch_at if launch_at is not None else max(start - 5000, 0)
            op_idx = self.op(op, at - 100, launch_dur + 200, rank=rank, scope=scope, phase=phase, step=step)
        launch = -1
        if launch_at is not None:
            launch = self.b.row("launches", rank=rank, tid=1, start_ns=launch_at, dur_ns=launch_dur,
                                name="cudaLaunchKernel", correlation=self.corr, op=op_idx)
        return self.b.row("kernels", rank=rank, device=0, stream=stream, start_ns=start, dur_ns=dur, name=name,
                          correlation=self.corr, launch=launch, op=op_idx, scope=scope, phase=phase, step=step)

    def memcpy(self, start: int, dur: int, rank: int = 0, nbytes: int = 1 << 20, direction: str = "HtoD",
               phase: str | None = None, step: int = -1, stream: int = 9) -> int:
        return self.b.row("memcpy", rank=rank, device=0, stream=stream, start_ns=start, dur_ns=dur, kind="memcpy",
                          direction=direction, bytes=nbytes, name=f"Memcpy {direction}", phase=phase, step=step)

    def collective(self, kernel: int, rank: int = 0, name: str = "allreduce", nbytes: int = 1 << 20) -> int:
        return self.b.row("collectives", rank=rank, name=name, bytes_in=nbytes, bytes_out=nbytes, kernel=kernel)

    def build(self):
        return self.b.build()


def decode_run(steps: int = 4, layers: int = 2, ranks: int = 1, moe: str = "loop", shared: str = "separate",
               launch_gap: int = 0, gemm_scale: float = 1.0, experts: int = 4, device: dict | None = None,
               allreduce_ns: int = 20_000):
    """A tiny decode run: step 0 prefill, steps 1..`steps` decode, `layers` layers per step.

    Per layer: qkv GEMM, attention, o_proj GEMM (+ all-reduce when ranks > 1), router, routed experts (`loop`: one
    GEMM kernel per expert, `grouped`: one grouped-GEMM kernel) and the shared expert (`separate`: its own GEMM;
    `fused`: folded into the routed kernel). Every kernel starts `launch_gap` ns after the previous one ends and is
    launched just before it starts (so gaps are host-bound). `gemm_scale` scales every GEMM duration.
    """
    s = Synth(ranks=ranks, device=device)
    for rank in range(ranks):
        t = 1_000_000
        for step in range(steps + 1):
            phase = "prefill" if step == 0 else "decode"
            for layer in range(layers):
                items: list[tuple[str, str, int, tuple | None]] = [
                    ("attn.qkv", "nvjet_tst_128x64_qkv", int(30_000 * gemm_scale), SKINNY),
                    ("attn.core", "flash_fwd_splitkv_kernel", 25_000, None),
                    ("attn.o_proj", "nvjet_tst_128x64_oproj", int(20_000 * gemm_scale), SKINNY),
                ]
                if ranks > 1:
                    items.append(("attn.o_proj", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", allreduce_ns, None))
                items.append(("moe.router", "nvjet_tst_64x8_router", 5_000, SKINNY))
                if moe == "loop":
                    items += [("moe.routed", "Cijk_Alik_Bljk_BBS_BH_MT64x64_expert", int(12_000 * gemm_scale), SKINNY)
                              for _ in range(experts)]
                else:
                    items.append(("moe.routed", "cutlass_grouped_gemm_sm90_bf16", int(20_000 * gemm_scale), SKINNY))
                if shared == "separate":
                    items.append(("moe.shared", "nvjet_tst_128x64_shared", int(15_000 * gemm_scale), SKINNY))
                for role, name, dur, op in items:
                    scope = f"layers.{layer}.{role}"
                    t += launch_gap
                    k = s.kernel(name, t, dur, rank=rank, op=op, scope=scope, phase=phase, step=step,
                                 launch_at=t - 1500, launch_dur=1000)
                    if name.startswith("nccl"):
                        s.collective(k, rank=rank)
                    t += dur
            t += 50_000  # sampling between steps (outside every window)
    return s.build()
