"""JUnit XML for the fast-path gate: one <testcase> per assertion or built-in check.

classname = the spec id plus the rule code (e.g. `mmprof-reference-fast.FP003`), name = the assertion id.
A failed assertion is a <failure> (message + evidence lines); "no evidence" is an <error>, because a gate
that could not judge is not a pass; "not applicable" (the model has no such part) is <skipped> with its reason. Every test case also carries its evidence in <system-out>.

Every string from the profile or the spec goes through `mmprof.render.safe.visible` first: control characters
(which XML 1.0 cannot carry) and bidi overrides become visible escapes, so the document stays well-formed and a
name cannot fake a line of the report.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from mmprof.fileio import atomic_write
from mmprof.render.safe import visible as v


def to_xml(result: Any, suite_name: str = "mmprof.verify-fastpath") -> bytes:
    """The JUnit document for a `VerifyResult`."""
    counts = result.counts()
    suites = ET.Element("testsuites", name=suite_name, tests=str(len(result.results)),
                        failures=str(counts["fail"]), errors=str(counts["no_evidence"]))
    suite = ET.SubElement(suites, "testsuite", name=v(result.spec_id), tests=str(len(result.results)),
                          failures=str(counts["fail"]), errors=str(counts["no_evidence"]),
                          skipped=str(counts.get("not_applicable", 0)), time="0")
    props = ET.SubElement(suite, "properties")
    for k, val in (("spec_source", result.spec_source), ("profile", result.profile or ""),
                   ("events_source", result.source), ("events", str(result.events)),
                   ("attributed", str(result.attributed)), ("exit_code", str(result.exit_code))):
        ET.SubElement(props, "property", name=k, value=v(val))
    for r in result.results:
        case = ET.SubElement(suite, "testcase", classname=v(f"{result.spec_id}.{r.code}"), name=v(r.id), time="0")
        judged = [f"judged from: {r.judged_from}"] if getattr(r, "judged_from", "") else []
        body = "\n".join(v(x) for x in [r.message, *r.evidence, *judged])  # one line per item: a name cannot add one
        if r.status == "fail":
            el = ET.SubElement(case, "failure", message=v(f"{r.code} {r.message}")[:1000], type=v(r.code))
            el.text = body
        elif r.status == "no_evidence":
            el = ET.SubElement(case, "error", message=v(f"{r.code} no evidence: {r.message}")[:1000], type="NoEvidence")
            el.text = body
        elif r.status == "not_applicable":  # skipped with its reason: neither a failure nor a pass
            ET.SubElement(case, "skipped", message=v(f"{r.code} not applicable: {r.message}")[:1000])
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join(x for x in [v(r.description or ""), body] if x)
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def write_junit(result: Any, path: str | os.PathLike) -> Path:
    return atomic_write(path, to_xml(result))


def error_xml(message: str, error_type: str = "BadInput", profile: str | None = None,
              suite_name: str = "mmprof.verify-fastpath") -> bytes:
    """The JUnit document of a gate that could not run (bad input, no evidence before any check): one testcase
    with an <error>, so a CI job that reads the file sees the failure and its reason (docs/fastpath.md)."""
    suites = ET.Element("testsuites", name=suite_name, tests="1", failures="0", errors="1")
    suite = ET.SubElement(suites, "testsuite", name="mmprof.verify-fastpath", tests="1", failures="0", errors="1",
                          skipped="0", time="0")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="profile", value=v(profile or ""))
    ET.SubElement(props, "property", name="exit_code", value="2")
    case = ET.SubElement(suite, "testcase", classname="mmprof.verify-fastpath", name="input", time="0")
    el = ET.SubElement(case, "error", message=v(message)[:1000], type=v(error_type))
    el.text = v(message)
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def write_error_junit(message: str, path: str | os.PathLike, error_type: str = "BadInput",
                      profile: str | None = None) -> Path:
    return atomic_write(path, error_xml(message, error_type, profile))
