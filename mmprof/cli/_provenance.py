"""`--inductor-provenance FILE`: Inductor's kernel provenance (node mappings / stack traces / a TORCH_TRACE log /
a debug dir) attached to the profile, so that its Inductor kernels are attributed by what they fused."""

from __future__ import annotations

import click

from mmprof.importers.inductor_provenance import attach, load


def provenance_option(f):
    return click.option(
        "--inductor-provenance", "inductor_provenance", multiple=True, type=click.Path(),
        help="Inductor's kernel provenance for the traced run (repeatable): a debug dir or its "
             "inductor_provenance_tracking_node_mappings.json, the kernel stack-trace artifact, or a TORCH_TRACE "
             "log (compile with INDUCTOR_PROVENANCE=1; docs/graphs.md).")(f)


def read_provenance(paths: tuple[str, ...]) -> dict | None:
    """The provenance files' data (None without any); a bad file is a one-line error before any import."""
    return load(list(paths)) if paths else None


def apply_provenance(profile, data: dict | None) -> None:
    """Attach read provenance data to the profile (nothing without any)."""
    if data is not None:
        attach(profile, data)
