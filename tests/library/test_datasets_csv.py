"""Reading a user's CSV (``fairpca.datasets._csv``): the first rows are checked before the rest
is read, the encoding is decided on every byte, and the table must fit in memory."""

from __future__ import annotations

import gzip
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairpca._memory import InsufficientMemoryError
from fairpca.datasets import _csv, load_user_data

HEADER = b"age,workclass,sex,income\n"


def _write_repeated_gzip(path: Path, rows: bytes, gib: float) -> None:
    """A ``.csv.gz`` of HEADER then ``rows`` repeated to ``gib`` GiB of text: one compressed
    member written again and again (concatenated members decompress to the concatenation)."""
    member = gzip.compress(rows, compresslevel=9)
    with path.open("wb") as out:
        out.write(gzip.compress(HEADER))
        for _ in range(int(gib * 2**30 / len(rows))):
            out.write(member)


def test_a_gzip_of_1_37_gib_with_a_missing_positive_label_fails_on_its_first_rows(
    tmp_path, failed_load
):
    # The issue: 5 MB that inflate to 1.37 GiB (under the 2 GiB budget) ran 181 s to 7.43 GB
    # before the check its first rows fail.
    path = tmp_path / "adult-like.csv.gz"
    rows = b"39,State-gov,Male,<=50K\n50,Private,Female,>50K\n" * 20_000
    _write_repeated_gzip(path, rows, 1.37)
    assert path.stat().st_size < 6 * 10**6
    seconds, kind, message, peak = failed_load(
        path, label="income", sensitive="sex", positive_label="yes"
    )
    assert kind == "ValueError", message
    assert message.startswith(
        "positive_label='yes' does not occur in the first 5000 rows of label column 'income', "
        "which hold the values ['<=50K', '>50K']; the rest of adult-like.csv.gz was not read."
    )
    print(f"refused {seconds:.2f} s into reading, peak RSS {peak / 1e6:.0f} MB")
    assert seconds < 10 and peak < 10**9, (seconds, peak)


def _never_scanned(monkeypatch):
    def scan(*args, **kwargs):
        raise AssertionError("the rest of the file was read")

    monkeypatch.setattr(_csv, "scan_text", scan)


def _people(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.normal(size=n).round(3),
            "sex": rng.choice(["F", "M"], n),
            "income": rng.choice(["high", "low"], n),
        }
    )


def test_missing_columns_and_labels_fail_before_the_rest_is_read(tmp_path, monkeypatch):
    path = tmp_path / "people.csv.gz"
    _people(20_000).to_csv(path, index=False)
    _never_scanned(monkeypatch)
    with pytest.raises(ValueError, match=r"Column\(s\) \['race'\] not found"):
        load_user_data(path, label="income", sensitive="race")
    with pytest.raises(ValueError, match=r"Column\(s\) \['incme'\] not found.*did you mean"):
        load_user_data(path, label="incme", sensitive="sex")
    with pytest.raises(ValueError, match=r"positive_label='High' does not occur in the first 5000"):
        load_user_data(path, label="income", sensitive="sex", positive_label="High")


def test_a_file_sorted_by_label_is_searched_for_the_positive_label(tmp_path):
    frame = _people(8000).sort_values("income", ascending=False)  # 'low' rows first
    frame.loc[frame.index[:6000], "income"] = "low"
    path = tmp_path / "sorted.csv"
    frame.to_csv(path, index=False)
    data = load_user_data(path, label="income", sensitive="sex", positive_label="high")
    assert data.y.sum() == (frame["income"] == "high").sum() > 0
    only_low = tmp_path / "only-low.csv.bz2"
    frame.assign(income="low").to_csv(only_low, index=False)
    with pytest.raises(
        ValueError,
        match=r"positive_label='high' does not occur in label column 'income': the first 5000 "
        r"rows of label column 'income' hold only \['low'\], and its text is nowhere in",
    ):
        load_user_data(only_low, label="income", sensitive="sex", positive_label="high")


def test_first_rows_cut_inside_a_quoted_field_are_parsed(tmp_path):
    frame = _people(6000)
    frame["note"] = "plain"
    frame.loc[4999, "note"] = "two\nlines"  # the 5001st line of text is inside this field
    path = tmp_path / "quoted.csv"
    frame.to_csv(path, index=False)
    data = load_user_data(path, label="income", sensitive="sex", positive_label="high")
    assert data.n_samples == 6000


def test_a_compressed_semicolon_file_is_read_with_its_separator(tmp_path):
    path = tmp_path / "semicolon.csv.xz"
    _people(500).to_csv(path, index=False, sep=";")
    data = load_user_data(path, label="income", sensitive="sex", positive_label="high")
    assert data.n_samples == 500 and list(data.X.columns) == ["x"]


# ---------------------------------------------------------------------------- encoding


def _languages(n: int) -> str:
    lines = ["x,lang,y"] + [f"{i},{'Français' if i % 2 else 'English'},{i % 3 == 0}"
                             for i in range(n)]  # fmt: skip
    return "\n".join(lines) + "\n"


def _load(path: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_user_data(path, label="y", sensitive="lang", screen=False)
    return data, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_a_latin_1_file_is_read_as_latin_1_throughout(tmp_path, suffix):
    path = tmp_path / f"latin{suffix}"
    text = _languages(8000).encode("latin-1")
    path.write_bytes(gzip.compress(text) if suffix == ".csv.gz" else text)
    data, caught = _load(path)
    assert sorted(data.sensitive["lang"].unique()) == ["English", "Français"]
    assert caught == [
        f"Data file {path} is not UTF-8 (byte 30, on line 3, is not valid UTF-8); the whole "
        "file is read as Latin-1. Re-save it as UTF-8 if characters look wrong."
    ]


def test_latin_1_only_after_64_kib_is_read_as_latin_1_not_blamed_on_the_separator(tmp_path):
    text = _languages(8000).replace("Français", "French")
    cut = text.index("\n", 100_000) + 1
    path = tmp_path / "late.csv"
    path.write_bytes(text[:cut].encode() + "0,Français,True\n".encode("latin-1"))
    data, caught = _load(path)
    assert set(data.sensitive["lang"]) == {"English", "French", "Français"}
    assert len(caught) == 1 and caught[0].startswith(f"Data file {path} is not UTF-8 (byte ")


@pytest.mark.parametrize("latin_first", [True, False])
def test_a_file_mixing_utf_8_and_latin_1_is_refused_naming_both_lines(tmp_path, latin_first):
    text = _languages(8000)
    cut = text.index("\n", 100_000) + 1
    first, second = ("latin-1", "utf-8") if latin_first else ("utf-8", "latin-1")
    path = tmp_path / "mixed.csv"
    path.write_bytes(text[:cut].encode(first) + text[cut:].encode(second))
    later = text[: text.index("Français", cut)].count("\n") + 1  # line of the first after cut
    utf8_line, other_line = (later, 3) if latin_first else (3, later)
    with pytest.raises(ValueError, match="mixes two text encodings") as error:
        load_user_data(path, label="y", sensitive="lang", screen=False)
    message = str(error.value)
    assert f"UTF-8 characters (the first on line {utf8_line}, byte " in message
    assert f"not UTF-8 (the first on line {other_line}, byte " in message
    assert message.endswith("Re-save the whole file as UTF-8.")


# ---------------------------------------------------------------------------- memory


def test_a_table_that_would_not_fit_in_memory_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "people.csv.gz"
    _people(20_000).to_csv(path, index=False)
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "1MB")
    monkeypatch.setattr(_csv.pd, "read_csv", _refuse_whole_read(pd.read_csv))
    with pytest.raises(InsufficientMemoryError, match=r"the table of data file people.csv.gz \("):
        load_user_data(path, label="income", sensitive="sex", positive_label="high")
    monkeypatch.undo()
    assert load_user_data(path, label="income", sensitive="sex", positive_label="high")


def _refuse_whole_read(read_csv):
    """``pd.read_csv`` for the first rows (a buffer) only: reading the file is an error."""

    def read(source, *args, **kwargs):
        if isinstance(source, str | os.PathLike):
            raise AssertionError("the whole file was parsed")
        return read_csv(source, *args, **kwargs)

    return read
