"""The one skeleton of the range-based importers (rocpd, rocprofv3 CSV and JSON, nsys SQLite).

Every one of those formats holds the same things: CPU ranges (roctx / NVTX markers), runtime API calls, kernels and
copies that carry a key shared with the call that issued them (a correlation id, or rocpd's stack id), and
sometimes collective API calls (RCCL). A format module reads its own layout into the named rows below (one
`RangeRows` per rank) and decides what only it knows (names, units, stream ids, which call owns a key); `fill`
then writes the Profile tables the same way for all of them:

  markers -> scopes (nesting per thread)            -> `add_scopes`
  calls   -> launches (the ones that issued GPU work, or launch / copy / capture calls by name)
  kernels -> kernels, linked to their launch, with scope / scope_path / phase / step from the launch call
  copies  -> memcpy, linked and attributed the same way
  collective API calls -> collectives (attributed by their own thread and time); without them, NCCL / RCCL
  kernels by name (`add_comm_kernels`)

Graph replays are marked afterwards for every format (importers/graph_replays.py, called by `import_paths`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from mmprof.importers._timeline import ScopeNest, add_comm_kernels, add_scopes, attribute, extend
from mmprof.profiles.profile import ProfileBuilder


class Marker(NamedTuple):
    """A CPU range (roctx / NVTX push-pop or start-end range, or a zero-length mark)."""

    tid: int
    start: int
    end: int | None  # None: a mark (zero length)
    name: str


class Call(NamedTuple):
    """A runtime API call (or a collective API call, with its canonical collective name)."""

    tid: int | None
    start: int
    end: int
    name: str | None
    corr: Any  # the key kernels and copies share with it (stored in `correlation`)


class Kernel(NamedTuple):
    """One kernel dispatch; grid in workgroups / blocks (a format with work-items divides first)."""

    start: int
    end: int
    device: int | None
    stream: int | None
    corr: Any
    name: str
    grid_x: int | None
    grid_y: int | None
    grid_z: int | None
    block_x: int | None
    block_y: int | None
    block_z: int | None


class Copy(NamedTuple):
    """One memory copy or memset."""

    start: int
    end: int
    device: int | None
    stream: int | None
    corr: Any
    kind: str  # memcpy | memset
    direction: str | None
    bytes: int | None
    name: str | None


@dataclass
class RangeRows:
    """One rank's rows as a format read them, and the format's linking decisions.

    `keep`: indices into `calls` of the calls that become `launches` rows (in that order); `owner`: key -> index
    into `calls` of the call that issued the GPU work carrying that key (it must be kept). `collectives`: the
    collective API calls when the format traced them (even none named a collective), None when it did not: then
    NCCL / RCCL kernels are the collectives. `unlinked`: the end of the warning "rank R: N of M kernels ..." for
    kernels with no launch, None when the format has no API calls to link them to.
    """

    markers: list[Marker] = field(default_factory=list)
    scope_source: str = "roctx"
    calls: list[Call] = field(default_factory=list)
    keep: list[int] = field(default_factory=list)
    owner: dict[Any, int] = field(default_factory=dict)
    kernels: list[Kernel] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)
    collectives: list[Call] | None = None
    unlinked: str | None = None


# -- the formats' linking policies -----------------------------------------------------------------------------
def first_owner(calls: Sequence[Call], among: Iterable[int] | None = None,
                valid: Callable[[Any], bool] = lambda k: k is not None) -> dict[Any, int]:
    """key -> the first call (of `among`, default all) carrying it: one correlation id, one issuing call."""
    owner: dict[Any, int] = {}
    for i in (range(len(calls)) if among is None else among):
        k = calls[i].corr
        if valid(k) and k not in owner:
            owner[k] = i
    return owner


def gpu_keys(*rows: Iterable[Kernel | Copy]) -> set:
    """The keys carried by kernels and copies."""
    return {r.corr for group in rows for r in group}


def issuing(calls: Sequence[Call], is_launch: Callable[[str], Any], keys: set | None = None,
            owner: dict[Any, int] | None = None, rows: Iterable[Kernel | Copy] = ()) -> list[int]:
    """Calls kept as launches: a launch / copy / capture call by name, or one that issued GPU work - every call
    whose key some kernel or copy carries (`keys`), or only the owner of such a key (`owner` with `rows`)."""
    if owner is not None:
        used = {owner[r.corr] for r in rows if r.corr in owner}
        return [i for i, c in enumerate(calls) if i in used or is_launch(c.name or "")]
    keys = keys or set()
    return [i for i, c in enumerate(calls) if c.corr in keys or is_launch(c.name or "")]


# -- the skeleton ---------------------------------------------------------------------------------------------
def fill(b: ProfileBuilder, rank: int, rows: RangeRows) -> list[str]:
    """Write one rank's scopes, launches, kernels, copies and collectives; returns the warnings."""
    warnings: list[str] = []
    m = rows.markers
    nest = add_scopes(b, rank, [x.tid for x in m], [x.start for x in m], [x.end for x in m], [x.name for x in m],
                      rows.scope_source) if m else None
    launch_of = _launches(b, rank, rows)

    k = rows.kernels
    nk = len(k)
    if nk:
        launch, (scope, path, phase, step) = _link(b, nest, launch_of, k)
        missing = sum(1 for x in launch if x < 0)
        if missing and rows.unlinked:
            warnings.append(f"rank {rank}: {missing} of {nk} kernels {rows.unlinked}")
        col = _columns(k, Kernel)
        extend(b, "kernels", nk, rank=[rank] * nk, device=col.device, stream=col.stream, start_ns=col.start,
               dur_ns=[e - s for s, e in zip(col.start, col.end)], name=col.name, grid_x=col.grid_x,
               grid_y=col.grid_y, grid_z=col.grid_z, block_x=col.block_x, block_y=col.block_y, block_z=col.block_z,
               correlation=col.corr, launch=launch, scope=scope, scope_path=path, phase=phase, step=step)

    c = rows.copies
    if c:
        launch, (scope, _path, phase, step) = _link(b, nest, launch_of, c)
        col = _columns(c, Copy)
        extend(b, "memcpy", len(c), rank=[rank] * len(c), device=col.device, stream=col.stream, start_ns=col.start,
               dur_ns=[e - s for s, e in zip(col.start, col.end)], kind=col.kind, direction=col.direction,
               bytes=col.bytes, name=col.name, correlation=col.corr, launch=launch, scope=scope, phase=phase,
               step=step)

    if rows.collectives is None:
        add_comm_kernels(b, b.n("kernels") - nk, nk)
    elif rows.collectives:
        col = rows.collectives
        _s, _p, phase, step = attribute(nest, [x.tid for x in col], [x.start for x in col])
        extend(b, "collectives", len(col), rank=[rank] * len(col), start_ns=[x.start for x in col],
               dur_ns=[x.end - x.start for x in col], name=[x.name for x in col], phase=phase, step=step)
    return warnings


def _columns(rows: Sequence[tuple], kind: type) -> Any:
    """Named rows -> one list per field (the same named tuple type, holding columns)."""
    return kind._make(list(col) for col in zip(*rows))


def _launches(b: ProfileBuilder, rank: int, rows: RangeRows) -> dict[Any, int]:
    """Append the kept calls as launches; returns key -> launches row of the call that owns the key."""
    calls, keep = rows.calls, rows.keep
    first = b.n("launches")
    extend(b, "launches", len(keep), rank=[rank] * len(keep), tid=[calls[i].tid for i in keep],
           start_ns=[calls[i].start for i in keep], dur_ns=[calls[i].end - calls[i].start for i in keep],
           name=[calls[i].name for i in keep], correlation=[calls[i].corr for i in keep])
    row = {i: first + j for j, i in enumerate(keep)}
    return {key: row[i] for key, i in rows.owner.items() if i in row}


def _link(b: ProfileBuilder, nest: ScopeNest | None, launch_of: dict[Any, int], rows: Sequence[Kernel | Copy]
          ) -> tuple[list[int], tuple[list, list, list, list]]:
    """Each row's launch (-1 none), and scope / scope_path / phase / step of that launch call's thread and time."""
    corr = rows[0]._fields.index("corr")
    launch = [launch_of.get(r[corr], -1) for r in rows]
    tid, start = b.cols["launches"]["tid"], b.cols["launches"]["start_ns"]
    return launch, attribute(nest, [tid[x] if x >= 0 else -1 for x in launch],
                             [start[x] if x >= 0 else -1 for x in launch])
