"""The commands that run the reference runtime and join it with the analyses, as library calls: `mmprof run`
(`run.py`, its options and their validation in `run_options.py`), `mmprof demo` (`demo.py`) and `mmprof shapes`
(`shapes.py`; its live mode in `shapes_live.py`). Each module is named after its command (cli/<name>.py parses
the options, render/text/<name>.py prints the result).

They sit in the capture layer (above importers / analysis / runtime / render) because they start the runtime
under capture and import its trace; the capture machinery itself (session, record, backends, rank launcher) is
in the modules of `mmprof.capture` and never imports this package. Importing this package imports nothing.
"""
