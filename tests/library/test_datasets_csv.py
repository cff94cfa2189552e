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
from fairpca.datasets import LabelValuesWarning, NumericTextWarning, _csv, load_user_data

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
        r"rows of label column 'income' hold only \['low'\], and no later row of",
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
        f"Data file {path} is not UTF-8 (byte offset 30, on line 3, is not valid UTF-8); the whole "
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


def _only_column_reads(read_csv):
    """``pd.read_csv`` that may read one column of the file (or a buffer) but not the table."""

    def read(source, *args, **kwargs):
        if (
            isinstance(source, str | os.PathLike)
            and not kwargs.get("usecols")
            and (kwargs.get("nrows") != 1)
        ):
            raise AssertionError("the whole table was parsed")
        return read_csv(source, *args, **kwargs)

    return read


def test_a_skewed_csv_is_refused_by_the_parse_not_trusted_from_its_first_rows(
    tmp_path, monkeypatch
):
    # The issue: long decimals in the first rows, single digits after. The first rows parse to
    # 0.5 byte per byte of text, the rest to 4, so the estimate (389 MiB for 310 MB, under a
    # 600M limit) let a parse through that peaked at 3.26 GB. Here: 11 MB of text, 38 MB as a
    # table, estimated at 5 MB; a 40MB limit.
    long_row = ",".join(["0.1234567890123456"] * 10)
    path = tmp_path / "skewed.csv"
    with path.open("w") as out:
        out.write(",".join(f"x{j}" for j in range(10)) + ",sex,income\n")
        out.write(f"{long_row},0,1\n{long_row},1,0\n" * 2500)
        out.write("1,2,3,4,5,6,7,8,9,0,0,1\n5,6,7,8,9,0,1,2,3,4,1,0\n" * 200_000)
    first_rows = _csv.parse_head(*_csv.read_head(path), ",", "utf-8")
    per_byte = first_rows.memory_usage(deep=True).sum() / path.stat().st_size * 5000 / 405_000
    estimate = _csv.PARSE_FACTOR * per_byte * path.stat().st_size
    assert estimate < 20e6  # the first rows' estimate fits in 40MB ...
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "40MB")
    chunks = []
    concat = pd.concat
    monkeypatch.setattr(_csv.pd, "concat", lambda parts, **kw: chunks.append(1) or concat(parts))
    with pytest.raises(InsufficientMemoryError) as error:
        load_user_data(path, label="income", sensitive="sex", screen=False)
    message = str(error.value)  # ... the parse counts what it holds, and stops
    assert message.startswith("Not enough memory: the table of data file skewed.csv (")
    assert "only 40.0 MB are available" in message and "FAIRPCA_MEMORY_LIMIT" in message
    assert not chunks  # refused before the table was put together
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "400MB")
    data = load_user_data(path, label="income", sensitive="sex", screen=False)
    assert data.n_samples == 405_000 and data.X["x0"].dtype == np.float64


def test_the_positive_label_is_searched_in_its_column_not_in_the_bytes(tmp_path, monkeypatch):
    # The issue: the label column never holds "yes" but the married column does, so the text
    # search found it and the whole gzip file was parsed before the label check failed.
    rows = [
        f"{i % 90},{'yes' if i % 3 else 'no'},{'F' if i % 2 else 'M'},no\n" for i in range(6000)
    ]
    path = tmp_path / "married.csv.gz"
    path.write_bytes(gzip.compress(("age,married,sex,income\n" + "".join(rows) * 20).encode()))
    monkeypatch.setattr(_csv.pd, "read_csv", _only_column_reads(pd.read_csv))
    with pytest.raises(ValueError) as error:
        load_user_data(path, label="income", sensitive="sex", positive_label="yes")
    assert str(error.value) == (
        "positive_label='yes' does not occur in label column 'income': the first 5000 rows of "
        "label column 'income' hold only ['no'], and no later row of married.csv.gz has it as "
        "its label. Pass the label value of the positive class as it is written in the file."
    )
    # A label column that is numbers (no text to search for) is searched alike.
    numbers = tmp_path / "numbers.csv"
    frame = _people(12_000).assign(income=0)
    frame.to_csv(numbers, index=False)
    with pytest.raises(ValueError, match="positive_label=1 does not occur in label column"):
        load_user_data(numbers, label="income", sensitive="sex", positive_label=1)
    monkeypatch.undo()
    frame.loc[9000, "income"] = 1
    frame.to_csv(numbers, index=False)
    data = load_user_data(numbers, label="income", sensitive="sex", positive_label=1, screen=False)
    assert data.y.sum() == 1


def test_a_third_label_value_after_the_first_rows_is_a_named_warning(tmp_path):
    # The issue: 200 rows with label 2 after row 5,000 silently counted as negatives.
    frame = _people(8000).assign(income=lambda f: (f["income"] == "high").astype(int))
    frame.loc[6000:6199, "income"] = 2
    path = tmp_path / "three.csv"
    frame.to_csv(path, index=False)
    with pytest.warns(LabelValuesWarning) as caught:
        data = load_user_data(path, label="income", sensitive="sex", positive_label=1)
    (warning,) = [w for w in caught if w.category is LabelValuesWarning]
    message = str(warning.message)
    assert message.startswith(
        "Label column 'income' holds 3 distinct values; with positive_label=1 each of the "
        "others counts as negative (y = 0): '0' ("
    )
    assert "'2' (200 rows)" in message and "correct or drop the rows" in message
    assert data.y.sum() == (frame["income"] == 1).sum()


def test_text_in_a_numeric_column_after_the_first_rows_is_a_named_warning(tmp_path):
    # The issue: 50 "unknown" ages after row 5,000 silently made age categorical.
    frame = _people(8000)
    frame["age"] = np.random.default_rng(1).integers(18, 90, 8000).astype(object)
    frame.loc[6000:6049, "age"] = "unknown"
    path = tmp_path / "ages.csv"
    frame.to_csv(path, index=False)
    with pytest.warns(NumericTextWarning) as caught:
        load_user_data(path, label="income", sensitive="sex", positive_label="high")
    (warning,) = [w for w in caught if w.category is NumericTextWarning]
    message = str(warning.message)
    assert message.startswith(
        "Column 'age' holds numbers in 7950 rows and text in 50 rows (1 distinct text "
        "value(s), the most frequent in 50 rows; not shown), so it is read as categorical"
    )
    assert "unknown" not in message


def test_the_chunked_parse_gives_the_table_of_one_parse(tmp_path, monkeypatch):
    # Types are inferred per chunk: a column of numbers with text in one chunk only, or with
    # an empty cell in one, is read again whole, so the table is the one pandas gives at once.
    monkeypatch.setattr(_csv, "TABLE_CHUNK_ROWS", 1000)
    n = np.arange(5000)
    frame = pd.DataFrame(
        {
            "count": n,
            "gap": np.where(n == 2500, "", "1"),
            "age": np.where(n == 4200, "unknown", (n % 50).astype(str)),
            "flag": np.where(n > 3000, "True", "False"),
            "city": np.resize(["a", "b", "c"], 5000),
        }
    )
    path = tmp_path / "types.csv"
    frame.to_csv(path, index=False)
    chunked = _csv.read_table_bounded(path, ",", "utf-8", path.stat().st_size)
    pd.testing.assert_frame_equal(chunked, pd.read_csv(path, low_memory=False))


def test_a_row_with_too_many_fields_is_named_not_blamed_on_the_separator(tmp_path):
    rows = [f"{20 + i},Private,{'Male' if i % 2 else 'Female'},{i % 2}" for i in range(30)]
    rows[9] += ",extra,fields"
    (tmp_path / "bad.csv").write_text(HEADER.decode() + "\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"Expected 4 fields in line 11, saw 6\. Mend that line"):
        load_user_data(tmp_path / "bad.csv", label="income", sensitive="sex")
