"""Checks with stable codes: fast-path checks and assertion kinds (FP), shape findings (SH).

`registry` holds the codes (documented in rules/checks.toml) and the functions registered for them; `spec` is
the fast-path spec language; `verify` evaluates a spec; `fastpath` and `assertions` implement the FP codes;
`shapes_analytic` and `shapes_observed` the SH codes.
"""
