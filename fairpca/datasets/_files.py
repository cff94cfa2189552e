"""Locating, reading and verifying the raw dataset files.

Adult and German credit ship inside the package (``fairpca/data/*.xz``, the original bytes
compressed with xz). Every other file is read from a data directory laid out like the
project's ``shared/datasets`` folder::

    <data dir>/uci-adult/adult.data
    <data dir>/uci-adult/adult.test
    <data dir>/uci-german/german.data
    <data dir>/uci-bank-marketing/bank-additional-full.csv
    <data dir>/propublica-compas/compas-scores-two-years.csv
    <data dir>/lee2022-splits/{adult,german,compas}/{train,test}_{0..9}.csv.gz

The data directory is the ``data_dir`` argument of a loader or, when that is ``None``, the
``FAIRPCA_DATA_DIR`` environment variable. The SHA-256 of every raw file is checked before
it is parsed.
"""

from __future__ import annotations

import bz2
import codecs
import functools
import gzip
import hashlib
import lzma
import os
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from .._memory import format_bytes, size_setting

__all__ = [
    "DATA_DIR_ENV",
    "LINE_LIMIT_ENV",
    "READ_BUDGET_ENV",
    "ChecksumMismatchError",
    "DataTooLargeError",
    "DatasetNotFoundError",
    "RawFile",
    "TextScan",
    "line_number",
    "read_table",
    "resolve_data_dir",
    "scan_text",
]

DATA_DIR_ENV = "FAIRPCA_DATA_DIR"
READ_BUDGET_ENV = "FAIRPCA_MAX_READ_BYTES"
LINE_LIMIT_ENV = "FAIRPCA_MAX_LINE_BYTES"
DEFAULT_READ_BUDGET = 2 * 2**30  # decompressed bytes of one data file
DEFAULT_LINE_LIMIT = 16 * 2**20  # bytes of one CSV line (a header of 10^5 long names fits)
_SCAN_CHUNK = 1 << 20
# A compressed file is refused as soon as its size, projected from the expansion so far
# (at least 64 MiB of text), exceeds the budget by this factor: a 10 MB gzip bomb of
# 10 GiB stops after a few hundred MiB instead of the whole budget.
_PROJECTION_SLACK = 3
_PROJECT_AFTER = 1 << 26

_UCI_ADULT = "https://archive.ics.uci.edu/dataset/2/adult"
_UCI_GERMAN = "https://archive.ics.uci.edu/dataset/144/statlog+german+credit+data"
_UCI_BANK = "https://archive.ics.uci.edu/dataset/222/bank+marketing (bank-additional.zip)"
_PROPUBLICA = "https://github.com/propublica/compas-analysis"
LEE2022_SOURCE = "https://github.com/nick-jhlee/fair-manifold-pca (data release of Lee et al. 2022)"


class DatasetNotFoundError(FileNotFoundError):
    """A raw dataset file is not where the loader looks for it.

    The message names the file, the path that was searched and where to download it.
    """


class DataTooLargeError(ValueError):
    """A data file is larger than the reading budget, or has a line over the line limit.

    Raised while streaming the file, before it is parsed.
    """


class ChecksumMismatchError(ValueError):
    """A raw dataset file does not have its published SHA-256 sum (corrupt or different)."""


@dataclass(frozen=True)
class RawFile:
    """One published raw data file.

    Parameters
    ----------
    subdir : str
        Folder of the file inside the data directory, e.g. ``"uci-adult"``.
    filename : str
        File name, e.g. ``"adult.data"``.
    sha256 : str or None
        Published SHA-256 of the raw bytes; ``None`` when no sum is published.
    source : str
        Where to download the file.
    bundled : bool, default=False
        Whether an xz-compressed copy ships in ``fairpca/data``.
    """

    subdir: str
    filename: str
    sha256: str | None
    source: str
    bundled: bool = False

    @property
    def relative_path(self) -> str:
        """Path of the file relative to the data directory."""
        return f"{self.subdir}/{self.filename}"


ADULT_DATA = RawFile(
    "uci-adult",
    "adult.data",
    "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
    _UCI_ADULT,
    bundled=True,
)
ADULT_TEST = RawFile(
    "uci-adult",
    "adult.test",
    "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
    _UCI_ADULT,
    bundled=True,
)
GERMAN_DATA = RawFile(
    "uci-german",
    "german.data",
    "b21f3d81db8071257d5ff1deaeba1fd4303b62712e6fcc9715c7a86202cb5871",
    _UCI_GERMAN,
    bundled=True,
)
BANK_FULL = RawFile(
    "uci-bank-marketing",
    "bank-additional-full.csv",
    "74adfc578bf77a7ff4bb1ba4a9f8709d9e3c6907342959c2c8416847e0afb4d8",
    _UCI_BANK,
)
COMPAS_TWO_YEARS = RawFile(
    "propublica-compas",
    "compas-scores-two-years.csv",
    "c451db85908b2f7fef1d83203bedf6b71ecda0d5af468d82ae62178f91d0cc7d",
    _PROPUBLICA,
)


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """Return the data directory: ``data_dir`` if given, else ``$FAIRPCA_DATA_DIR``.

    Parameters
    ----------
    data_dir : str, path-like or None
        Explicit data directory.

    Returns
    -------
    path : Path or None
        ``None`` when neither the argument nor the environment variable is set.
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    from_env = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(from_env).expanduser() if from_env else None


def not_found_error(raw: RawFile, searched: Path | None) -> DatasetNotFoundError:
    """Build the error for a missing raw file, saying where to look and what to download."""
    where = (
        f"looked for {searched}"
        if searched is not None
        else f"no data directory given (data_dir=None and {DATA_DIR_ENV} is not set)"
    )
    return DatasetNotFoundError(
        f"Dataset file {raw.filename!r} not found: {where}. Download it from {raw.source} and "
        f"place it at {DATA_DIR_ENV}/{raw.relative_path}, then set {DATA_DIR_ENV} to that "
        "data directory (or pass data_dir=...)."
    )


def verify_sha256(raw: RawFile, content: bytes, origin: str) -> None:
    """Raise :class:`ChecksumMismatchError` when ``content`` is not the published file."""
    if raw.sha256 is None:
        return
    actual = hashlib.sha256(content).hexdigest()
    if actual != raw.sha256:
        raise ChecksumMismatchError(
            f"SHA-256 mismatch for {origin}: expected {raw.sha256}, got {actual}. The file is "
            f"corrupt or not the published version; download it again from {raw.source} "
            f"(file {raw.relative_path})."
        )


def _bundled_resource(raw: RawFile):
    return resources.files("fairpca") / "data" / f"{raw.filename}.xz"


def _locate(raw: RawFile, data_dir) -> tuple[str | None, int, int]:
    """Return ``(path or None for the bundled copy, mtime_ns, size)`` used as the cache key."""
    if raw.bundled and data_dir is None:
        return None, 0, 0
    root = resolve_data_dir(data_dir)
    if root is None:
        raise not_found_error(raw, None)
    path = root / raw.subdir / raw.filename
    if not path.is_file() and (root / raw.filename).is_file():
        path = root / raw.filename  # the folder that holds the file (its checksum decides)
    if not path.is_file():
        raise not_found_error(raw, path)
    stat = path.stat()
    return str(path), stat.st_mtime_ns, stat.st_size


def _read_verified(raw: RawFile, path: str | None) -> bytes:
    if path is None:
        resource = _bundled_resource(raw)
        if not resource.is_file():
            raise DatasetNotFoundError(
                f"Bundled copy of {raw.filename!r} is missing from the installed package "
                f"(fairpca/data/{raw.filename}.xz); reinstall fairpca, or download the file "
                f"from {raw.source} and pass data_dir=<dir containing {raw.relative_path}>."
            )
        content = lzma.decompress(resource.read_bytes())
        verify_sha256(raw, content, f"bundled fairpca/data/{raw.filename}.xz")
        return content
    content = Path(path).read_bytes()
    verify_sha256(raw, content, path)
    return content


@functools.lru_cache(maxsize=32)
def _parse_cached(
    raw: RawFile,
    path: str | None,
    mtime_ns: int,
    size: int,
    parse: Callable[[bytes], pd.DataFrame],
) -> pd.DataFrame:
    # mtime_ns and size are part of the cache key only: a changed file is read again.
    return parse(_read_verified(raw, path))


def read_table(
    raw: RawFile,
    data_dir: str | os.PathLike[str] | None,
    parse: Callable[[bytes], pd.DataFrame],
) -> pd.DataFrame:
    """Read, verify and parse one raw file, caching the parsed frame per process.

    Parameters
    ----------
    raw : RawFile
        The file to read.
    data_dir : str, path-like or None
        Explicit data directory. For bundled files ``None`` means the bundled copy; for the
        others ``None`` means ``$FAIRPCA_DATA_DIR``.
    parse : callable
        Turns the verified raw bytes into a DataFrame.

    Returns
    -------
    frame : DataFrame
        A deep copy of the cached parsed frame, safe to modify.
    """
    path, mtime_ns, size = _locate(raw, data_dir)
    return _parse_cached(raw, path, mtime_ns, size, parse).copy(deep=True)


def _open_decompressed(path: Path) -> tuple[BinaryIO, BinaryIO]:
    """A binary stream of the file's content, decompressed by its suffix (one zip member),
    and the raw file it reads (whose position is the compressed bytes consumed)."""
    name = path.name.lower()
    raw = path.open("rb")
    opener = {".gz": gzip.GzipFile, ".bz2": bz2.BZ2File, ".xz": lzma.LZMAFile}
    for suffix, stream in opener.items():
        if name.endswith(suffix):
            return stream(fileobj=raw, mode="rb") if suffix == ".gz" else stream(raw), raw
    if not name.endswith(".zip"):
        return raw, raw
    archive = zipfile.ZipFile(raw)
    members = [info for info in archive.infolist() if not info.is_dir()]
    if len(members) != 1:
        raw.close()
        raise ValueError(
            f"Data file {path} is a zip archive with {len(members)} files; it must hold "
            "exactly one CSV file."
        )
    return archive.open(members[0]), raw


@dataclass
class TextScan:
    """What one streaming pass over a (decompressed) text file found.

    ``n_bytes``: the decompressed size; ``first_invalid``: offset of the first byte that is not
    valid UTF-8 (None if the whole file is UTF-8); ``first_multibyte``: offset of the first
    valid multi-byte UTF-8 character (None if none); ``found``: the needles that occur.
    """

    n_bytes: int = 0
    first_invalid: int | None = None
    first_multibyte: int | None = None
    found: set = field(default_factory=set)


# A valid multi-byte UTF-8 character (2, 3 or 4 bytes); in a file that is not UTF-8 it shows
# that two encodings are mixed.
_UTF8_MULTIBYTE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}"
)


class _Utf8Check:
    """Incremental check of UTF-8 validity: the first invalid byte and the first valid
    multi-byte character, chunk by chunk (an ASCII chunk costs one ``isascii``)."""

    def __init__(self, scan: TextScan):
        self.scan = scan
        self.decoder = codecs.getincrementaldecoder("utf-8")()

    def feed(self, chunk: bytes, offset: int, final: bool = False) -> None:
        scan = self.scan
        if chunk.isascii() and not self.decoder.getstate()[0]:
            return
        if scan.first_invalid is not None:  # only a valid character can still tell
            self._multibyte(chunk, offset)
            return
        pending = len(self.decoder.getstate()[0])
        try:
            self.decoder.decode(chunk, final)
        except UnicodeDecodeError as error:
            scan.first_invalid = offset - pending + error.start
        self._multibyte(chunk, offset)

    def _multibyte(self, chunk: bytes, offset: int) -> None:
        if self.scan.first_multibyte is None and (match := _UTF8_MULTIBYTE.search(chunk)):
            self.scan.first_multibyte = offset + match.start()


def scan_text(path: str | os.PathLike[str], needles: tuple[bytes, ...] = ()) -> TextScan:
    """Stream a (possibly compressed) text file once, within the reading bounds, finding its
    size, whether it is UTF-8 throughout, and which of ``needles`` occur in it.

    The decompressed size may not exceed ``$FAIRPCA_MAX_READ_BYTES`` (default 2 GiB) and no
    line may be longer than ``$FAIRPCA_MAX_LINE_BYTES`` (default 16 MiB); both are checked
    while streaming in 1 MiB chunks, so memory stays bounded whatever the file expands to.
    A compressed file whose size projected from its expansion so far is more than three
    times the budget stops early.

    Raises
    ------
    DataTooLargeError
        At the first chunk that crosses a bound.
    """
    path = Path(path)
    budget = size_setting(READ_BUDGET_ENV, DEFAULT_READ_BUDGET)
    line_limit = size_setting(LINE_LIMIT_ENV, DEFAULT_LINE_LIMIT)
    chunk_size = max(1, min(_SCAN_CHUNK, line_limit))  # a line inside one chunk is short
    scan, run, tail = TextScan(), 0, b""  # run: bytes since the last newline
    utf8 = _Utf8Check(scan)
    overlap = max((len(needle) for needle in needles), default=1) - 1
    stream, raw = _open_decompressed(path)
    compressed = path.stat().st_size if stream is not raw else 0
    with raw, stream:
        while chunk := stream.read(chunk_size):
            total = scan.n_bytes + len(chunk)
            projected = total * compressed / max(raw.tell(), 1) if total > _PROJECT_AFTER else 0
            if total > budget or projected > _PROJECTION_SLACK * budget:
                what = f"more than {format_bytes(budget)}" if total > budget else (
                    f"about {format_bytes(projected)} (projected from the first "
                    f"{format_bytes(total)})")  # fmt: skip
                raise _too_large(path, f"it expands to {what} of text", (
                    f"raise {READ_BUDGET_ENV} (e.g. {READ_BUDGET_ENV}=8GiB) if it is meant "
                    "to be this large"))  # fmt: skip
            first = chunk.find(b"\n")
            run = run + (len(chunk) if first < 0 else first)
            if run > line_limit:
                raise _too_large(path, f"a line is longer than {format_bytes(line_limit)}", (
                    "check the separator and the line endings, or raise "
                    f"{LINE_LIMIT_ENV} if the lines are meant to be this long"))  # fmt: skip
            if first >= 0:
                run = len(chunk) - chunk.rfind(b"\n") - 1
            utf8.feed(chunk, scan.n_bytes)
            if needles:  # in the chunk, or across its start
                seam = tail + chunk[:overlap]
                scan.found.update(n for n in needles if n in chunk or n in seam)
                tail = chunk[-overlap:] if overlap else b""
            scan.n_bytes = total
    utf8.feed(b"", scan.n_bytes, final=True)
    return scan


def line_number(path: str | os.PathLike[str], offset: int) -> int:
    """The line (from 1) of the (decompressed) file that holds byte ``offset``."""
    lines, done = 1, 0
    stream, raw = _open_decompressed(Path(path))
    with raw, stream:
        while done < offset and (chunk := stream.read(min(_SCAN_CHUNK, offset - done))):
            lines, done = lines + chunk.count(b"\n"), done + len(chunk)
    return lines


def _too_large(path: Path, what: str, fix: str) -> DataTooLargeError:
    return DataTooLargeError(f"Data file {path} is refused before parsing: {what}; {fix}.")
