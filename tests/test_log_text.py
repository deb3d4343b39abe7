"""mmprof/log_text.py: bytes of a log -> clean lines, bounded in size, whatever the bytes are.

The truths here are the terminal's and the codec's: a CRLF ends a line, a carriage return followed by text shows
that text (a progress bar's last state), invalid UTF-8 becomes U+FFFD (Python's "replace" handler), escape
sequences are formatting (ECMA-48 CSI / OSC), and nothing is lost at a chunk boundary.
"""

from __future__ import annotations

import io

import pytest

from mmprof.log_text import MAX_LINE_CHARS, BoundedStream, LineSplitter, clean, merge_streams, read_lines


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


def feed_all(keep: BoundedStream, data: bytes, chunk: int, t0: int = 0) -> None:
    for i in range(0, len(data), chunk):
        keep.feed(data[i:i + chunk], t0 + i)


@pytest.mark.parametrize("chunk", [7, 256, 4096, 65536])
def test_bounded_keeps_head_tail_and_wanted_middle_lines_whatever_the_chunks(chunk):
    lines = [f"line {i} " + "z" * (i % 50) for i in range(3000)]
    lines[1500] = "WANTED default config"
    lines[1501] = "WANTED\x1b[31m again"          # escape sequences removed from what is kept
    data = ("\n".join(lines) + "\n").encode()
    keep = BoundedStream("stdout", limit=16000, anchors=(b"WANTED",), wanted=lambda t: "WANTED" in t)
    feed_all(keep, data, chunk)
    kept = keep.lines()
    by_number = {ln.number: ln.text for ln in kept}
    assert by_number[1] == lines[0] and by_number[3000] == lines[2999]   # head and tail, numbered in the stream
    assert by_number[1501] == "WANTED default config" and by_number[1502] == "WANTED again"
    assert all(by_number[n] == lines[n - 1] for n in by_number if n not in (1502,))  # nothing shifted or mangled
    assert keep.total_lines == 3000 and keep.dropped(len(kept)) == 3000 - len(kept) > 2000
    assert sum(len(ln.text) for ln in kept) <= 16000 + 200               # within the bound
    assert [ln.number for ln in kept] == sorted(ln.number for ln in kept)


def test_bounded_keeps_everything_that_fits():
    keep = BoundedStream("stdout", limit=1 << 20)
    feed_all(keep, b"a\r\nb\rc\npartial", 3)
    assert [(ln.number, ln.text) for ln in keep.lines()] == [(1, "a"), (2, "c"), (3, "partial")]
    assert keep.total_lines == 3 and keep.dropped(3) == 0


def test_bounded_memory_does_not_grow_with_the_log():
    keep = BoundedStream("stdout", limit=8192)
    for i in range(20_000):
        keep.feed(b"y" * 50 + b"\n", i)
    assert len(keep.lines()) < 200 and keep.total_lines == 20_000
    assert sum(len(c) for _, c in keep._tail) <= 8192  # noqa: SLF001 (the bound itself)


def test_a_backlog_the_search_cannot_keep_up_with_is_dropped_unsearched_and_counted():
    keep = BoundedStream("stdout", limit=8192, anchors=(b"WANTED",), wanted=lambda t: True)
    keep.BACKLOG_MAX = 10_000
    for i in range(2000):
        keep.push(b"x" * 30 + (b" WANTED" if i == 1000 else b"") + b"\n", i)  # push only: nobody searches
    assert keep.unsearched > 0
    kept = keep.lines()
    assert keep.total_lines == 2000 and kept[-1].number == 2000          # numbering survives the gap
    assert [ln.number for ln in kept] == sorted({ln.number for ln in kept})


def test_streams_merge_in_arrival_order():
    a, b = BoundedStream("stdout"), BoundedStream("stderr")
    a.feed(b"one\n", 10)
    b.feed(b"two\n", 5)
    a.feed(b"three\n", 20)
    assert [ln.text for ln in merge_streams([a, b])] == ["two", "one", "three"]


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
