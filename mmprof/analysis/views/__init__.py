"""What the report, summary and classify commands show of one profile. Takes a Profile (and its event frame); gives the
report's per-phase tables and bottleneck statement (report), the per-rank summary (summary), the per-shape roofline
rows (by_shape), graph capture / replay counts (graph_summary) and the classified share (coverage). Imports every
stage below it.
"""
