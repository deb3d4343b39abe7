"""`mmprof classify PROFILE [--rules FILE] [--unclassified] [--json]`: kernel families and libraries by time.

Also `mmprof classify --name 'KERNEL NAME'` to see which rule a single name hits, and
`mmprof classify --list-rules [--json]` for the whole registry (classification rules and FP codes).
"""

from __future__ import annotations

import click

from mmprof.analysis.checks.registry import load_info
from mmprof.analysis.attribution.classify import load_rules
from mmprof.analysis.views.coverage import coverage
from mmprof.analysis.timeline.events import events_of
from mmprof.cli._common import console, echo_json, json_option, load_any
from mmprof.errors import BadInput, NoEvidence
from mmprof.names import display_name
from mmprof.render.text import classify as text


@click.command("classify")
@click.argument("profile", type=click.Path(), required=False)
@click.option("--rules", "rules_paths", type=click.Path(), multiple=True,
              help="Extra classification rules (TOML); repeatable. They extend / override the built-ins.")
@click.option("--unclassified", is_flag=True,
              help="List the kernel names no rule or word of the name places, by time (also those only their launching op placed).")
@click.option("--name", "names", multiple=True, help="Classify this kernel name instead of a profile; repeatable.")
@click.option("--top", type=click.IntRange(1, 10000), default=25, show_default=True, help="Rows per table.")
@click.option("--list-rules", is_flag=True, help="List every classification rule (in priority order) and the FP rule codes.")
@json_option
def classify(profile: str | None, rules_paths: tuple[str, ...], unclassified: bool, names: tuple[str, ...],
             top: int, list_rules: bool, as_json: bool) -> None:
    """Kernel name -> family, variant, library and path, with the share of time each explains.

    On a profile with no GPU kernels (a CPU run) the outermost compute CPU ops are classified instead.
    """
    rules = load_rules(rules_paths)
    if list_rules:
        checks = list(load_info().values())
        if as_json:
            echo_json({"rules": [r.to_dict() for r in rules.rules], "checks": [c.to_dict() for c in checks]})
            return
        text.render_kernel_rules(rules, console())
        text.render_checks(checks, console())
        return
    if names:
        rows = [dict(name=n, display_name=display_name(n), **rules.classify(n).to_dict()) for n in names]
        if as_json:
            echo_json(rows)
        else:
            text.render_lookups(rows, console())
        return
    if profile is None:
        raise BadInput("give a PROFILE (a profile or a trace) or --name KERNEL")
    frame = events_of(load_any(profile), rules)
    if not len(frame):
        raise NoEvidence(f"{profile}: no kernel events and no CPU ops to classify")
    cov = coverage(frame)
    if as_json:
        d = cov.to_dict()
        d["unclassified"] = d["unclassified"][: top if not unclassified else None]
        echo_json(d)
        return
    text.render_coverage(cov, console(), top=top, show_unclassified=unclassified)
