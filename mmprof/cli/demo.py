"""`mmprof demo`: the whole story on the embedded default (tiny M3, CPU) in about a minute
(mmprof.capture.workflows.demo)."""

from __future__ import annotations

import click

from mmprof.cli._common import console, echo_json, json_option
from mmprof.render.text.demo import render_demo
from mmprof.render.text.progress import progress_bar


@click.command("demo")
@click.option("--out-dir", default="mmprof-demo", show_default=True, help="Where the before/after Profiles go.")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--prompt-len", type=click.IntRange(min=16), default=128, show_default=True)
@click.option("--decode-steps", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Plain timing runs per side.")
@json_option
def demo(out_dir: str, batch: int, prompt_len: int, decode_steps: int, repeats: int, as_json: bool) -> None:
    """The whole story on the embedded default (tiny M3, CPU): before vs after, and what each command says."""
    from mmprof.capture.workflows.demo import (
        run_demo,  # imports the runtime (torch): only when the demo runs
    )

    with progress_bar(not as_json) as cb:
        res = run_demo(out_dir, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, repeats=repeats,
                       progress=cb)
    if as_json:
        echo_json(res.to_dict())
    else:
        render_demo(res, console())
