"""Reading and writing files safely: gzip detection, clear errors, atomic writes."""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from pathlib import Path

from mmprof.errors import BadInput

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, gunzipped when it is gzip (by content, not name). Errors are BadInput, one line."""
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p}: no such file")
    if p.is_dir():
        raise BadInput(f"{p}: is a directory, expected a file")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise BadInput(f"{p}: cannot read: {e.strerror or e}") from e
    if not data:
        raise BadInput(f"{p}: empty file")
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise BadInput(f"{p}: truncated or corrupt gzip ({e}); re-copy the file or re-run the capture") from e
        if not data:
            raise BadInput(f"{p}: gzip holds an empty file")
    return data


def head_bytes(path: str | os.PathLike, n: int = 4096) -> bytes:
    """The first n bytes of the (decompressed) content, for format sniffing without reading everything."""
    p = Path(path)
    with open(p, "rb") as f:
        start = f.read(2)
    try:
        if start == GZIP_MAGIC:
            with gzip.open(p, "rb") as f:
                return f.read(n)
        with open(p, "rb") as f:
            return f.read(n)
    except (EOFError, OSError, zlib.error) as e:
        raise BadInput(f"{p}: truncated or corrupt gzip ({e}); re-copy the file or re-run the capture") from e


def atomic_write(path: str | os.PathLike, data: bytes, compress: bool | None = None) -> Path:
    """Write `data` to `path` through a temporary file in the same folder, then rename into place.

    A crash mid-write leaves the old file (or nothing), never a half-written one. `compress` defaults to
    "the name ends in .gz".
    """
    p = Path(path)
    if compress is None:
        compress = p.suffix == ".gz"
    if compress:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode open() would
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def read_toml(path: str | os.PathLike, what: str) -> dict:
    """A TOML file as a dict; a missing file or bad TOML is a one-line BadInput naming `what` it should be."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"{p}: no such {what} file")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{p}: not valid TOML ({e})") from e
