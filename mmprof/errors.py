"""The error tree. The library raises these; the CLI prints one line and exits with `exit_code`.

Exit codes (docs/cli.md): 0 all good, 1 a check found violations, 2 bad usage, bad input or no evidence.
"""

from __future__ import annotations


class MmprofError(Exception):
    """Base of every error mmprof reports to a user. The message is one actionable line."""

    exit_code = 2


class BadInput(MmprofError):
    """A file or option that cannot be used: missing, truncated, empty, not what it claims to be."""


class UnsupportedFormat(BadInput):
    """A file mmprof recognises but does not read (e.g. a legacy rocprof v1 database)."""


class SchemaError(BadInput):
    """A Profile file with an unknown or newer schema version, or a malformed table."""


class NoEvidence(MmprofError):
    """An analysis had nothing to judge (no kernels, no matching region). Never a pass."""


class CaptureUnavailable(MmprofError):
    """A capture backend or tool is not installed here (rocprofv3, nsys, a GPU)."""


class NotComparable(MmprofError):
    """Two inputs that a comparison would mislead on: the same trace twice, two different models (`--force`
    compares them anyway)."""
