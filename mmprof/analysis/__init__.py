"""Pure analyses of a Profile, one sub-package per stage, in the order a profile goes through them (each imports
only the stages below it; docs/architecture.md "The stages of analysis/"): attribution (what each kernel is and
where it belongs) -> timeline (the event frame, built by the passes of timeline/frame_passes.py, and when its time
went where) -> shapes (expected and observed GEMM shapes) -> ranks and checks -> compare (two profiles) -> views
(what report, summary and classify show of one profile). Analyses never open files and never print.
"""
