"""What the engine's log says, as facts joined with the trace. Takes a Profile (its `log` table) and the event frame:
`facts` reads every line through the log rules (rules/logs.toml) into facts (backend chosen, config loaded or
defaulted, graph / compile mode, fallbacks, fusion counts), `join` ties each fact to the kernels it concerns (their
count, time and phases) and judges whether the kernels show the backend the log names. Imports timeline/ and
attribution/ only; checks/ and views/ read it.
"""
