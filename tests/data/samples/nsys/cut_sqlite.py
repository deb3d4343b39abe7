"""Cut a real Nsight Systems SQLite export to a time window: delete the rows outside it, keep the schema.

    python tests/data/samples/nsys/cut_sqlite.py FULL.sqlite OUT.sqlite END_NS

Copies FULL to OUT, then in every table with a `start` (or `timestamp`) column deletes the rows that start at or
after END_NS (nsys's session-relative nanoseconds); rows of the call-chain tables (`*_CALLCHAINS`, keyed by `id`)
that no kept row refers to any more (`COMPOSITE_EVENTS.id`, `OSRT_API.callchainId`,
`CUPTI_ACTIVITY_KIND_RUNTIME.callchainId`) are deleted too; then VACUUM. Every table, every column and every kept
row stay as they were (string tables, process / thread / device info, metadata untouched)."""
from __future__ import annotations

import shutil
import sqlite3
import sys

REFS = {"SAMPLING_CALLCHAINS": [("COMPOSITE_EVENTS", "id")],
        "OSRT_CALLCHAINS": [("OSRT_API", "callchainId")],
        "CUDA_CALLCHAINS": [("CUPTI_ACTIVITY_KIND_RUNTIME", "callchainId")]}


def cut(src: str, dst: str, end_ns: int) -> dict[str, tuple[int, int]]:
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    before = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    for t in tables:
        cols = {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')}
        col = "start" if "start" in cols else "timestamp" if "timestamp" in cols else None
        if col:
            con.execute(f'DELETE FROM "{t}" WHERE "{col}" >= ?', (end_ns,))
    for chain, users in REFS.items():
        if chain not in tables:
            continue
        live = " UNION ".join(f'SELECT "{c}" FROM "{u}" WHERE "{c}" IS NOT NULL' for u, c in users if u in tables)
        con.execute(f'DELETE FROM "{chain}" WHERE id NOT IN ({live})' if live else f'DELETE FROM "{chain}"')
    con.commit()
    con.execute("VACUUM")
    after = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    con.close()
    return {t: (after[t], before[t]) for t in tables if after[t] != before[t]}


if __name__ == "__main__":
    for t, (a, b) in cut(sys.argv[1], sys.argv[2], int(sys.argv[3])).items():
        print(f"{t}: {a} of {b} rows")
