"""Time of `display_name` over every distinct kernel name of the real traces in tests/data (the suite checks the
names, not the time; measured ~0.2 ms a name, 10 ms a name would be a blow-up). Prints one JSON line.

    python benchmarks/names_speed.py
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mmprof.importers import import_paths  # noqa: E402
from mmprof.names import demangle, display_name  # noqa: E402
from tests.test_names import DATA, TRACES  # noqa: E402


def main() -> None:
    names: set[str] = set()
    for f in (f for pat in TRACES for f in sorted(DATA.glob(pat))):
        prof = import_paths([f], check_ranks=False)
        for table in ("kernels", "memcpy"):
            names.update(n for n in prof.col(table, "name", decode=True) if n)
    display_name.cache_clear()
    demangle.cache_clear()
    t = time.perf_counter()
    for n in names:
        display_name(n)
    per = (time.perf_counter() - t) / max(len(names), 1)
    print(json.dumps({"bench": "names_speed", "names": len(names), "ms_per_name": round(per * 1e3, 4),
                      "goal_ms_per_name": 10, "within_goal": per < 0.01, "python": platform.python_version()}))


if __name__ == "__main__":
    main()
