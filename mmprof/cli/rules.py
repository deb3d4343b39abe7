"""`mmprof rules [CODE]`: every check code (FP fast-path checks and assertion kinds, SH shape findings) with what
it does, why it matters, an example and its known problems; `--kernels` for the kernel classification rules."""

from __future__ import annotations

import click

from mmprof.analysis.checks.registry import load_info
from mmprof.analysis.attribution.classify import default_rules
from mmprof.cli._common import console, echo_json, json_option
from mmprof.errors import BadInput
from mmprof.render.markdown import checks_markdown
from mmprof.render.text import classify as text


@click.command("rules")
@click.argument("code", required=False)
@click.option("--kernels", is_flag=True, help="List the kernel classification rules (in priority order) instead.")
@click.option("--markdown", is_flag=True, help="Print the check documentation as Markdown (docs/rules.md).")
@json_option
def rules(code: str | None, kernels: bool, markdown: bool, as_json: bool) -> None:
    """Every check code (FP, SH) with what it does, why, an example and known problems."""
    if kernels:
        rs = default_rules()
        if as_json:
            echo_json([r.to_dict() for r in rs.rules])
        else:
            text.render_kernel_rules(rs, console())
        return
    infos = load_info()
    checks = list(infos.values())
    if code is not None:
        if code.upper() not in infos:
            raise BadInput(f"no check {code!r}; codes are {', '.join(infos)}")
        checks = [infos[code.upper()]]
    if as_json:
        echo_json([c.to_dict() for c in checks])
    elif markdown:
        click.echo(checks_markdown(checks), nl=False)
    else:
        text.render_checks(checks, console(), verbose=code is not None)
