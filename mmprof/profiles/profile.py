"""The in-memory Profile: run metadata plus columnar tables over one shared string table.

Importers fill a `ProfileBuilder` (append to plain lists, intern strings), then `build()` freezes the
lists into numpy arrays. Analyses read tables through `Profile.df(name)` (a pandas DataFrame with string
columns decoded as categoricals) or through the raw arrays in `Profile.tables`.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any, Iterable

import numpy as np

from mmprof.errors import SchemaError
from mmprof.profiles.schema import MAX_RANK, MAX_TIME_NS, TABLES, column_kind, ref_target

NP_DTYPE = {"int": np.int64, "float": np.float64, "str": np.int32}


class StringTable:
    """Interns strings to dense integer ids. `None` maps to -1."""

    __slots__ = ("ids", "strings")

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self.strings: list[str] = list(strings)
        self.ids: dict[str, int] = {s: i for i, s in enumerate(self.strings)}

    def id(self, s: str | None) -> int:
        if s is None:
            return -1
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def __len__(self) -> int:
        return len(self.strings)


# The longest string (a kernel, op or scope name) a Profile holds: real kernel names reach about 5,000 characters
# (CUTLASS templates); a longer one is cut at import (docs/limits.md) to its head and tail around a marker that
# names its length and hash, so distinct names stay distinct and name parsing never sees megabytes.
MAX_NAME_CHARS = 16384
_HEAD, _TAIL = 12288, 3072


def cap_strings(strings: list[str]) -> int:
    """Cut (in place) every string longer than MAX_NAME_CHARS; returns how many were cut."""
    import hashlib

    n = 0
    for i, s in enumerate(strings):
        if isinstance(s, str) and len(s) > MAX_NAME_CHARS:
            h = hashlib.sha1(s.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            strings[i] = f"{s[:_HEAD]}...[{len(s):,} characters, cut; sha1 {h}]...{s[-_TAIL:]}"
            n += 1
    return n


def empty_column(kind: str, n: int = 0) -> np.ndarray:
    if kind == "float":
        return np.full(n, np.nan, dtype=np.float64)
    return np.full(n, -1, dtype=NP_DTYPE[kind])


def _no_owner() -> None:
    return None


class DerivedCache:
    """What analyses derive from one Profile, kept on it so that it is built once: `Profile.derived`.

    Its user is `mmprof.analysis.timeline.events.events_of` (the event frame, name "event_frame"). An entry is a value
    stored under a name with the objects it was built from (`inputs`, e.g. the rules set and the regions: compared
    by identity and held by the entry, so that they stay alive and cannot be confused with later objects) and a
    `stamp` of the profile's contents that the caller computes. `get` returns the value only while the inputs are
    the very same objects and the stamp is equal: a profile changed in place (graph-replay attribution writes
    columns) gets a rebuilt value, never a stale one. The cache belongs to one Profile object: a copy of it
    (copy.copy shares the attributes) gets a cache of its own (`Profile.derived`). Nothing here is saved, pickled
    (parallel import sends Profiles between processes) or deep-copied: those copies start empty.
    """

    __slots__ = ("owner", "_entries")

    def __init__(self, owner: "Profile | None" = None) -> None:
        self.owner = weakref.ref(owner) if owner is not None else _no_owner
        self._entries: dict[str, list[tuple[tuple, Any, Any]]] = {}   # name -> [(inputs, stamp, value)]

    def __reduce__(self):
        return (DerivedCache, ())

    def get(self, name: str, inputs: tuple, stamp: Any) -> Any | None:
        """The value stored under `name` for these very `inputs` and an equal `stamp`, else None."""
        for held, st, value in self._entries.get(name, ()):
            if len(held) == len(inputs) and all(a is b for a, b in zip(held, inputs)):
                return value if st == stamp else None
        return None

    def put(self, name: str, inputs: tuple, stamp: Any, value: Any) -> None:
        """Store `value` for `inputs` and `stamp`, replacing the entry of the same inputs."""
        entries = [e for e in self._entries.get(name, ())
                   if not (len(e[0]) == len(inputs) and all(a is b for a, b in zip(e[0], inputs)))]
        self._entries[name] = entries + [(tuple(inputs), stamp, value)]

    def clear(self) -> None:
        self._entries.clear()


class Profile:
    """One run of N ranks. `meta` is a JSON-able dict (see schema.META_SCHEMA); `tables[t][c]` are numpy arrays."""

    def __init__(self, meta: dict[str, Any], strings: list[str], tables: dict[str, dict[str, np.ndarray]]):
        self.meta = meta
        self.strings = strings
        self.tables = tables
        self._categories = None
        self._derived = DerivedCache(self)
        self._validate()

    @property
    def derived(self) -> DerivedCache:
        """The cache of what analyses derive from this profile (`DerivedCache`); a copy gets its own."""
        if self._derived.owner() is not self:
            self._derived = DerivedCache(self)
        return self._derived

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def empty(cls, meta: dict[str, Any] | None = None) -> "Profile":
        return ProfileBuilder(meta or {}).build()

    def _validate(self) -> None:
        for name, cols in TABLES.items():
            table = self.tables.setdefault(name, {})
            n = None
            for col, ctype, _ in cols:
                if col not in table:
                    table[col] = empty_column(column_kind(ctype), len(next(iter(table.values()))) if table else 0)
                arr = table[col]
                if n is None:
                    n = len(arr)
                elif len(arr) != n:
                    raise SchemaError(f"table {name!r}: column {col!r} has {len(arr)} rows, expected {n}")
        for name, cols in TABLES.items():
            for col, ctype, _ in cols:
                self._check_range(name, col, ctype)

    def _check_range(self, table: str, col: str, ctype: str) -> None:
        """Values every analysis relies on: string ids and row references that exist, ranks that are ranks,
        times within MAX_TIME_NS and no negative durations (a tampered file is refused, never half-read)."""
        arr = self.tables[table][col]
        if not len(arr) or column_kind(ctype) == "float":
            return
        lo, hi = int(arr.min()), int(arr.max())
        if ctype == "str":
            ok, what = lo >= -1 and hi < len(self.strings), f"string ids within the {len(self.strings)} strings"
        elif (target := ref_target(ctype)) is not None:
            m = len(next(iter(self.tables[target].values()))) if self.tables.get(target) else 0
            ok, what = lo >= -1 and hi < m, f"row numbers of table {target!r} ({m} rows) or -1"
        elif col == "rank":
            ok, what = -1 <= lo and hi <= MAX_RANK, f"ranks in 0..{MAX_RANK} (-1 unknown)"
        elif col == "start_ns":
            ok, what = -MAX_TIME_NS <= lo and hi <= MAX_TIME_NS, f"times within +-{MAX_TIME_NS:.0e} ns"
        elif col == "dur_ns":  # device events need a duration; elsewhere -1 means unknown
            least = 0 if table in ("kernels", "memcpy") else -1
            ok, what = least <= lo and hi <= MAX_TIME_NS, f"durations in {least}..{MAX_TIME_NS:.0e} ns"
        else:
            return
        if not ok:
            raise SchemaError(f"table {table!r} column {col!r} holds {lo}..{hi}; expected {what}")

    # -- access -------------------------------------------------------------------------------
    def n(self, table: str) -> int:
        cols = self.tables[table]
        return len(next(iter(cols.values())))

    def string(self, i: int) -> str | None:
        return None if i < 0 else self.strings[i]

    def col(self, table: str, column: str, decode: bool = False) -> np.ndarray:
        """A raw column; with decode=True a string column comes back as an object array of str/None."""
        arr = self.tables[table][column]
        if decode and _column_type(table, column) == "str":
            lut = np.array(self.strings + [None], dtype=object)
            return lut[np.where(arr < 0, len(self.strings), arr)]
        return arr

    def df(self, table: str) -> "Any":
        """The table as a pandas DataFrame; string columns are categoricals (null = NaN)."""
        import pandas as pd

        if table not in TABLES:
            raise KeyError(f"no table {table!r}; tables are {', '.join(TABLES)}")
        if self._categories is None:
            self._categories = pd.Index(self.strings, dtype=object)
        data = {}
        for col, ctype, _ in TABLES[table]:
            arr = self.tables[table][col]
            if ctype == "str":
                data[col] = pd.Categorical.from_codes(arr, dtype=pd.CategoricalDtype(self._categories))
            else:
                data[col] = arr
        return pd.DataFrame(data)

    def dataframes(self) -> dict[str, Any]:
        return {t: self.df(t) for t in TABLES}

    @property
    def ranks(self) -> list[int]:
        listed = [r["rank"] for r in self.meta.get("ranks", [])]
        if listed:
            return sorted(set(listed))
        seen: set[int] = set()
        for t in TABLES:
            if t != "log":  # a log line is printed by a process, not an event of a rank (rank -1: no rank)
                seen.update(np.unique(self.tables[t]["rank"]).tolist())
        return sorted(seen)

    def rank_meta(self, rank: int) -> dict[str, Any]:
        for r in self.meta.get("ranks", []):
            if r.get("rank") == rank:
                return r
        return {"rank": rank}

    def device_info(self, rank: int, device: int | None = None) -> dict[str, Any] | None:
        devs = self.rank_meta(rank).get("devices") or []
        for d in devs:
            if device is None or d.get("index") == device:
                return d
        return None

    def select(self, table: str, mask: np.ndarray) -> dict[str, np.ndarray]:
        return {c: a[mask] for c, a in self.tables[table].items()}

    def __repr__(self) -> str:
        counts = ", ".join(f"{t}={self.n(t)}" for t in TABLES if self.n(t))
        return f"<Profile ranks={self.ranks} {counts or 'empty'}>"


def _column_type(table: str, column: str) -> str:
    for col, ctype, _ in TABLES[table]:
        if col == column:
            return ctype
    raise KeyError(f"table {table!r} has no column {column!r}")


class ProfileBuilder:
    """Collects rows column-wise. Importers append to `cols[table][column]` lists or call `row()`.

    String columns take Python strings (or None) when added through `row()`; when appending to the lists
    directly, append `self.strings.id(s)` instead.
    """

    def __init__(self, meta: dict[str, Any] | None = None, strings: StringTable | None = None) -> None:
        self.meta: dict[str, Any] = meta if meta is not None else {}
        self.strings = strings or StringTable()
        self.cols: dict[str, dict[str, list]] = {t: {c: [] for c, _, _ in cols} for t, cols in TABLES.items()}
        self._defaults = {
            t: {c: (float("nan") if column_kind(ct) == "float" else -1) for c, ct, _ in cols} for t, cols in TABLES.items()
        }
        self._str_cols = {t: {c for c, ct, _ in cols if ct == "str"} for t, cols in TABLES.items()}

    def row(self, table: str, **values: Any) -> int:
        """Append one row; missing columns get their null value. Returns the row index."""
        cols = self.cols[table]
        strs = self._str_cols[table]
        for c, default in self._defaults[table].items():
            v = values.pop(c, default)
            if c in strs and v != -1:
                v = self.strings.id(v)
            cols[c].append(v)
        if values:
            raise KeyError(f"table {table!r} has no column(s) {', '.join(values)}")
        return len(cols["rank"]) - 1

    def n(self, table: str) -> int:
        return len(self.cols[table]["rank"])

    def build(self) -> Profile:
        tables: dict[str, dict[str, np.ndarray]] = {}
        for t, cols in TABLES.items():
            n = len(self.cols[t]["rank"])
            out = {}
            for c, ctype, _ in cols:
                vals = self.cols[t][c]
                kind = column_kind(ctype)
                if n and len(vals) == 0:  # a column this importer does not fill: null
                    vals = empty_column(kind, n)
                if len(vals) != n:
                    raise SchemaError(f"builder table {t!r}: column {c!r} has {len(vals)} rows, expected {n}")
                out[c] = np.asarray(vals, dtype=NP_DTYPE[kind]) if n else empty_column(kind)
            tables[t] = out
        cut = cap_strings(self.strings.strings)
        if cut:
            self.meta.setdefault("warnings", []).append(
                f"{cut} name(s) longer than {MAX_NAME_CHARS:,} characters were cut (head and tail kept, with the "
                "full name's length and hash)")
        return Profile(self.meta, self.strings.strings, tables)


def merge_profiles(profiles: list[Profile], meta: dict[str, Any] | None = None) -> Profile:
    """Concatenate profiles (e.g. one per rank) into one: strings re-interned, refs offset.

    `meta` defaults to the first profile's meta with the `ranks` lists concatenated.
    """
    if len(profiles) == 1 and meta is None:
        return profiles[0]
    st = StringTable()
    tables: dict[str, dict[str, list[np.ndarray]]] = {t: {c: [] for c, _, _ in cols} for t, cols in TABLES.items()}
    offsets = {t: 0 for t in TABLES}
    for p in profiles:
        remap = np.array([st.id(s) for s in p.strings] + [-1], dtype=np.int32)
        for t, cols in TABLES.items():
            for c, ctype, _ in cols:
                arr = p.tables[t][c]
                if ctype == "str":
                    arr = remap[np.where(arr < 0, len(p.strings), arr)]
                elif (target := ref_target(ctype)) is not None:
                    arr = np.where(arr < 0, -1, arr + offsets[target])
                tables[t][c].append(arr)
        for t in TABLES:
            offsets[t] += p.n(t)
    out = {
        t: {c: (np.concatenate(v) if v else empty_column(column_kind(ct))) for (c, ct, _), v in zip(TABLES[t], tables[t].values())}
        for t in TABLES
    }
    if meta is None:
        meta = copy.deepcopy(profiles[0].meta)
        meta["ranks"] = [r for p in profiles for r in p.meta.get("ranks", [])]
        warnings = [w for p in profiles for w in p.meta.get("warnings", [])]
        if warnings:
            meta["warnings"] = warnings
        files = [f for p in profiles for f in p.meta.get("source", {}).get("files", [])]
        if files:
            meta.setdefault("source", {})["files"] = files
    return Profile(meta, st.strings, out)
