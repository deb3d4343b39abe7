"""The range-based importers (rocpd, rocprofv3 CSV / JSON, nsys) produce, table by table, exactly the rows they
produced before they shared one skeleton (importers/_ranges.py).

The truth is tests/data/importer_golden/summaries.json: row counts and digests of the decoded values of every
table, written by the importers at the commit before the skeleton (tests/importer_golden.py says how). A change
here means an importer now fills some table differently: if that is deliberate, regenerate the file and say so.
"""

from __future__ import annotations

import json

import pytest

from tests.importer_golden import CASES, GOLDEN, summary

WANT = json.loads(GOLDEN.read_text())


def test_golden_covers_every_case():
    assert sorted(WANT) == sorted(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_unchanged(case):
    got = summary(case)
    # a table added to the schema after the golden was written (schema 3: `log`) must be empty for these importers
    added = {k: v for k, v in got.items() if k not in WANT[case]}
    assert all(v["n"] == 0 for v in added.values()), f"{case}: new tables hold rows: {added}"
    changed = {k: (WANT[case][k], v) for k, v in got.items() if k in WANT[case] and WANT[case][k] != v}
    assert not changed, f"{case}: tables that differ from the golden import: {changed}"
