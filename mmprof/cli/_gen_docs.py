"""Generate docs/cli.md from the commands' --help: `python -m mmprof.cli._gen_docs > docs/cli.md`.

tests/test_docs.py regenerates it and fails when the checked-in file is stale.
"""

from __future__ import annotations

import click

from mmprof.cli import COMMANDS, cli

HEADER = """# Command reference

Generated from `--help` by `python -m mmprof.cli._gen_docs > docs/cli.md`; a test keeps it in sync.

Exit codes: **0** all good; **1** a gate found violations: `verify-fastpath`, `shapes --check` and
`report --check` (without `--check`, `shapes` and `report` are diagnostics and exit 0 whatever their findings
say; `record` exits with its command's code); **2** bad usage, bad input or no evidence to judge (never a pass).
`--debug` (or `MMPROF_DEBUG=1`) shows tracebacks instead of one-line errors.
"""


def render() -> str:
    parts = [HEADER]
    # the group's context settings apply to every subcommand (and help_option_names must be explicit:
    # click caches each command's help option, so inheriting it would depend on what ran before)
    ctx = click.Context(cli, info_name="mmprof", **cli.context_settings)
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        if cmd is None:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx, max_content_width=100, terminal_width=100,
                            help_option_names=["-h", "--help"])
        parts.append(f"## `mmprof {name}`\n\n```text\n{cmd.get_help(sub).rstrip()}\n```\n")
        for subname in (cmd.list_commands(sub) if isinstance(cmd, click.Group) else []):
            subcmd = cmd.get_command(sub, subname)
            leaf = click.Context(subcmd, info_name=subname, parent=sub, max_content_width=100, terminal_width=100,
                                 help_option_names=["-h", "--help"])
            parts.append(f"## `mmprof {name} {subname}`\n\n```text\n{subcmd.get_help(leaf).rstrip()}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
