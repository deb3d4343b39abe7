"""Cut a saved mmprof Profile (`mmprof record` / `import` output) to a time window, rows copied as they are.

    python tests/data/samples/cut_profile.py IN.json.gz OUT.json.gz FROM_S [TO_S]

FROM_S / TO_S are seconds after the profile's first event (TO_S: the end when left out). Kept:
- every launch (runtime API call) that starts in the window, every kernel and copy it issued (wherever it ran),
  every kernel / copy / launch with no launch that starts in the window, every op, scope, collective and
  dispatch row that starts in the window;
- then, until nothing changes, every row a kept row refers to (`ref:` columns of the schema: a kernel's op, its
  graph launch, an op's parent, a scope's parent, ...): a replayed kernel keeps the capture-time op it was
  attributed to and that op's enclosing ops and ranges, even where they lie before the window.
Each kept row keeps every column value; only the row indices in `ref:` columns are renumbered to the kept rows.
The string table and the metadata are copied whole. Written with mmprof's own writer (`save_profile`)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from mmprof.profiles.io import load_profile, save_profile  # noqa: E402
from mmprof.profiles.profile import Profile  # noqa: E402
from mmprof.profiles.schema import TABLES, ref_target  # noqa: E402


def cut(p: Profile, lo_s: float, hi_s: float | None = None) -> Profile:
    t0 = min(int(p.tables[t]["start_ns"].min()) for t in TABLES if p.n(t) and "start_ns" in p.tables[t])
    lo = t0 + int(lo_s * 1e9)
    hi = t0 + int(hi_s * 1e9) if hi_s is not None else np.iinfo(np.int64).max
    keep = {}
    for t in TABLES:
        cols = p.tables[t]
        n = p.n(t)
        if t == "log":  # the engine's log is of the whole run, not of a time window: kept whole
            keep[t] = np.ones(n, bool)
            continue
        if n == 0 or "start_ns" not in cols:
            keep[t] = np.zeros(n, bool)
            continue
        s = cols["start_ns"]
        keep[t] = (s >= lo) & (s < hi)
    launches = keep["launches"]
    for t in ("kernels", "memcpy"):
        la = p.tables[t]["launch"]
        issued = np.zeros(p.n(t), bool)
        has = la >= 0
        issued[has] = launches[la[has]]
        keep[t] = np.where(has, issued, keep[t])
    refs = [(t, c, ref_target(ct)) for t, spec in TABLES.items() for c, ct, _ in spec if ref_target(ct)]
    changed = True
    while changed:
        changed = False
        for t, c, target in refs:
            r = p.tables[t][c][keep[t]]
            r = r[r >= 0]
            new = keep[target].copy()
            new[r] = True
            if new.sum() != keep[target].sum():
                keep[target] = new
                changed = True
    index = {t: np.cumsum(keep[t]) - 1 for t in TABLES}
    tables = {}
    for t, spec in TABLES.items():
        cols = {}
        for c, ct, _ in spec:
            a = p.tables[t][c][keep[t]].copy()
            target = ref_target(ct)
            if target:
                a = np.where(a >= 0, index[target][np.maximum(a, 0)], -1)
            cols[c] = a
        tables[t] = cols
    return Profile(dict(p.meta), list(p.strings), tables)


def main() -> None:
    src, dst, lo = sys.argv[1], sys.argv[2], float(sys.argv[3])
    hi = float(sys.argv[4]) if len(sys.argv) > 4 else None
    p = load_profile(src)
    q = cut(p, lo, hi)
    save_profile(q, dst)
    print(dst, {t: f"{q.n(t)} of {p.n(t)}" for t in TABLES}, Path(dst).stat().st_size, "bytes")


if __name__ == "__main__":
    main()
