"""mmprof/log_text.py: bytes of a log -> clean lines, bounded in size, whatever the bytes are.

The truths here are the terminal's and the codec's: a CRLF ends a line, a carriage return followed by text shows
that text (a progress bar's last state), invalid UTF-8 becomes U+FFFD (Python's "replace" handler), escape
sequences are formatting (ECMA-48 CSI / OSC), and nothing is lost at a chunk boundary.
"""

from __future__ import annotations

import io

import pytest

from mmprof.log_text import MAX_LINE_CHARS, BoundedLines, Line, LineSplitter, clean, read_lines


def split(chunks: list[bytes], stream: str = "stdout") -> list[str]:
    sp = LineSplitter(stream)
    out = []
    for c in chunks:
        out += sp.feed(c, 1)
    out += sp.close(2)
    return [ln.text for ln in out]


def test_newlines_crlf_and_partial_last_line():
    assert split([b"a\nb\r\nc"]) == ["a", "b", "c"]
    assert split([b"a\r", b"\nb\n"]) == ["a", "b"]          # CRLF split across two reads
    assert split([b"\n\n"]) == ["", ""]                      # empty lines are lines
    assert split([b""]) == []


def test_carriage_return_shows_what_follows_as_a_terminal_does():
    assert split([b"\r 10%", b"\r 50%", b"\r100%\n"]) == ["100%"]
    assert split([b"abc\r\r\n"]) == ["abc"]                  # CR then newline: the line stays
    assert split([b"prefix \rbar 1", b"\rbar 2\ndone\n"]) == ["bar 2", "done"]


def test_invalid_utf8_nul_and_multibyte_split_across_chunks():
    assert split([b"\xff\xfe bin\x00\n"]) == ["\ufffd\ufffd bin\x00"]
    assert split([b"\xe2\x82", b"\xac\n"]) == ["\u20ac"]      # EURO SIGN split in two reads
    assert split([b"\xe2\x82"]) == ["\ufffd"]                 # cut at the end: replaced, never an exception


def test_escape_sequences_are_removed():
    assert clean("\x1b[32mINFO\x1b[0m x") == "INFO x"
    assert clean("\x1b]0;title\x07text") == "text"             # OSC (window title)
    assert clean("\x1b[2J\x1b[Hclear") == "clear"
    assert clean("plain") == "plain"
    assert split([b"\x1b[33mWARNING\x1b[0m \x1b[90m12-01\x1b[0m m\n"]) == ["WARNING 12-01 m"]


def test_a_line_longer_than_the_limit_is_cut_and_says_so():
    sp = LineSplitter("file", max_chars=10)
    lines = sp.feed(b"x" * 25 + b"\nnext\n")
    assert lines[0].text == "x" * 10 + " ...[line cut: 25 characters]"
    assert lines[1].text == "next"
    assert MAX_LINE_CHARS >= 8192  # vLLM's engine config line (~4,000 characters) fits whole


def test_numbers_and_times_of_lines():
    sp = LineSplitter("stderr")
    got = sp.feed(b"a\nb", 100) + sp.feed(b"c\n", 200)
    assert [(ln.text, ln.number, ln.time_ns, ln.stream) for ln in got] == [("a", 1, 100, "stderr"),
                                                                           ("bc", 2, 100, "stderr")]
    assert sp.bytes == 5


def test_bounded_keeps_head_tail_and_wanted_middle_lines():
    keep = BoundedLines(limit=8000, keep=lambda t: "WANTED" in t)
    lines = [Line(f"line {i}", "stdout", i + 1) for i in range(2000)]
    lines[1000] = Line("WANTED default config", "stdout", 1001)
    keep.extend(lines)
    kept = keep.lines()
    assert kept[0].number == 1 and kept[-1].number == 2000          # head and tail
    assert any(ln.text == "WANTED default config" for ln in kept)   # the fact line in the middle
    assert keep.seen == 2000 and keep.dropped == 2000 - len(kept)
    assert keep.dropped_by == {"stdout": keep.dropped}
    assert sum(len(ln.text) + 40 for ln in kept) <= 8000 + 60       # within the bound (one line of slack)
    assert [ln.number for ln in kept] == sorted(ln.number for ln in kept)  # arrival order


def test_bounded_memory_does_not_grow_with_the_log():
    keep = BoundedLines(limit=4096)
    for i in range(100_000):
        keep.add(Line("y" * 50, "stdout", i + 1))
    assert len(keep.lines()) < 100
    assert keep.seen == 100_000


def test_read_lines_streams_a_file_in_chunks():
    data = b"".join(b"row %d\r\n" % i for i in range(10_000)) + b"tail"
    got = list(read_lines(io.BytesIO(data), chunk=777))  # chunk boundaries inside lines and inside CRLF
    assert len(got) == 10_001
    assert got[0].text == "row 0" and got[9_999].text == "row 9999" and got[-1].text == "tail"


@pytest.mark.parametrize("noise", [bytes(range(256)) * 40, b"\x00" * 5000, b"\r" * 5000, b"\x1b[" * 3000])
def test_binary_noise_never_raises_and_stays_bounded(noise):
    sp = LineSplitter("file", max_chars=1000)
    lines = sp.feed(noise) + sp.close()
    assert all(len(ln.text) <= 1000 + 40 for ln in lines)
