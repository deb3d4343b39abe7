"""Display names that keep distinct kernels distinct in one table (docs/names.md "Distinct kernels").

`mmprof.names.display_name` shortens one name; two different kernels can shorten to the same text (lambda instances
1 and 2 of one loop, DeepGEMM's GemmType 0 and 1 at a narrow width, `deep_ep::internode_ll::dispatch` vs
`deep_ep::internode::dispatch`). `distinct_display_names` shortens a whole column and adds a suffix to those only.
Base module: imports only `mmprof.names` and `mmprof.cxx_text`.
"""

from __future__ import annotations

import re

from mmprof.cxx_text import split_template as _split_template
from mmprof.cxx_text import split_top as _split_top
from mmprof.names import DEFAULT_MAX_LEN, display_name, function_name

_INSTANCE = re.compile(r"\(instance (\d+)\)|\{lambda\([^)]*\)#(\d+)\}|'lambda(\d+)'")


def _tags(raws: list[str]) -> list[str]:
    """Short texts that tell apart distinct names sharing one display name: the lambda instance, else the
    namespaces that differ, else the template arguments that differ, else an ordinal. All distinct."""
    def distinct(tags: list[str]) -> bool:
        return all(tags) and len(set(tags)) == len(tags)

    inst = [",".join(next(x for x in m.groups() if x) for m in _INSTANCE.finditer(r)) for r in raws]
    if distinct(inst):
        return [f"lambda {t}" for t in inst]
    ns = [_split_top(function_name(r), "::")[:-1] for r in raws]
    lead = 0
    while all(len(c) > lead for c in ns) and len({c[lead] for c in ns}) == 1:
        lead += 1
    nst = ["::".join(c[lead:]) for c in ns]
    if distinct(nst):
        return nst
    longs = [display_name(r, 10_000) for r in raws]
    args = [_split_top(_split_template(x)[1] or "", ",") for x in longs]
    width = max(len(a) for a in args)
    diff = [i for i in range(width) if len({a[i].strip() if i < len(a) else "" for a in args}) > 1]
    argt = [", ".join(a[i].strip() for i in diff if i < len(a))[:32] for a in args]
    if distinct(argt):
        return argt
    words = [list(dict.fromkeys(re.findall(r"[A-Za-z_]\w*", r))) for r in raws]  # identifiers not in every name
    common = set(words[0]).intersection(*map(set, words[1:]))
    own = [", ".join([w for w in ws if w not in common][:2])[:32] for ws in words]
    if distinct(own):
        return own
    return [f"#{i + 1}" for i in range(len(raws))]


def distinct_display_names(names: list[str], max_len: int = DEFAULT_MAX_LEN) -> list[str]:
    """`display_name` of each name, where two different names that would show the same text in one table get a
    suffix that tells them apart (`par_ranged2d_kernel<PdV_kernel, int> [lambda 2]`, `dispatch [internode_ll]`,
    `sm90_fp8_gemm_1d2d_impl [GemmType=1]`). Equal names stay equal."""
    shown = [display_name(n, max_len) for n in names]
    groups: dict[str, list[str]] = {}
    for n, d in zip(names, shown):
        if n not in groups.setdefault(d, []):
            groups[d].append(n)
    fixed: dict[str, str] = {}
    for d, raws in groups.items():
        if len(raws) > 1:
            raws = sorted(raws)
            for r, t in zip(raws, _tags(raws)):
                fixed[r] = f"{display_name(r, max(16, max_len - len(t) - 3))} [{t}]"
    return [fixed.get(n, d) for n, d in zip(names, shown)]
