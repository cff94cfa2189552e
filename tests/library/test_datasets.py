"""Tests for fairpca.datasets: bundled and external loaders, user files, preprocessing."""

from __future__ import annotations

import gzip
import lzma
import os
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairpca.datasets import (
    DATASET_NAMES,
    ChecksumMismatchError,
    Dataset,
    DatasetNotFoundError,
    LabelValuesWarning,
    load_adult,
    load_bank,
    load_compas,
    load_dataset,
    load_german,
    load_lee2022_split,
    load_user_data,
    make_preprocessor,
)

ADULT_FEATURES = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "native_country",
]
GERMAN_FEATURES = [
    "checking_account_status",
    "duration_months",
    "credit_history",
    "purpose",
    "credit_amount",
    "savings_account",
    "employment_since",
    "installment_rate",
    "personal_status",
    "other_debtors",
    "residence_since",
    "property",
    "age",
    "other_installment_plans",
    "housing",
    "existing_credits",
    "job",
    "people_liable",
    "telephone",
    "foreign_worker",
]


def _external_dir(*relative: str) -> Path:
    """The FAIRPCA_DATA_DIR folder, or skip when it is unset or lacks the files."""
    root = os.environ.get("FAIRPCA_DATA_DIR")
    if not root:
        pytest.skip("FAIRPCA_DATA_DIR is not set; point it at the datasets folder to run this")
    missing = [name for name in relative if not (Path(root) / name).exists()]
    if missing:
        pytest.skip(f"FAIRPCA_DATA_DIR={root} lacks {missing}")
    return Path(root)


def _bundled_copy(tmp_path: Path, subdir: str, filename: str) -> Path:
    """Decompress a bundled raw file into ``tmp_path/<subdir>/<filename>``."""
    target = tmp_path / subdir / filename
    target.parent.mkdir(parents=True, exist_ok=True)
    packed = (resources.files("fairpca") / "data" / f"{filename}.xz").read_bytes()
    target.write_bytes(lzma.decompress(packed))
    return target


def _group_rates(data: Dataset, column: str) -> dict:
    return data.y.groupby(data.sensitive[column].to_numpy()).mean().round(4).to_dict()


# ------------------------------------------------------------------------- bundled data


def test_adult_counts_rates_and_columns():
    data = load_adult()
    assert data.n_samples == 48_842
    assert abs(data.positive_rate - 0.239) < 0.001
    assert list(data.X.columns) == ADULT_FEATURES
    assert list(data.sensitive.columns) == ["sex"]
    assert data.sensitive["sex"].value_counts().to_dict() == {"Male": 32_650, "Female": 16_192}
    assert _group_rates(data, "sex") == {"Female": 0.1093, "Male": 0.3038}
    assert data.X.isna().sum().sum() == 0
    assert (data.X["workclass"] == "missing").sum() == 2_799
    assert data.y.dtype == np.int64 and set(data.y.unique()) == {0, 1}
    numeric = ["age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week"]
    assert all(data.X[c].dtype == np.float64 for c in numeric)
    assert all(isinstance(data.X[c].dtype, pd.CategoricalDtype) for c in ["workclass", "race"])


def test_adult_splits_and_missing_policy():
    train, test = load_adult(split="train"), load_adult(split="test")
    assert (train.n_samples, test.n_samples) == (32_561, 16_281)
    assert not test.X["native_country"].astype(str).str.startswith("|").any()
    assert abs(test.positive_rate - 0.2362) < 1e-4
    dropped = load_adult(missing="drop")
    assert dropped.n_samples == 45_222
    assert abs(dropped.positive_rate - 0.2478) < 1e-4
    assert not (dropped.X == "missing").any().any()
    with pytest.raises(ValueError, match="split must be"):
        load_adult(split="validation")
    with pytest.raises(ValueError, match="missing must be"):
        load_adult(missing="impute")


def test_adult_multi_attribute_and_drop():
    data = load_adult(sensitive=("sex", "race"), drop="fnlwgt")
    assert list(data.sensitive.columns) == ["sex", "race"]
    assert {"sex", "race", "fnlwgt"}.isdisjoint(data.X.columns)
    assert data.sensitive["race"].nunique() == 5
    assert data.sensitive["race"].value_counts()["White"] == 41_762
    assert set(data.sensitive_encoding) == {"sex", "race"}
    with pytest.raises(ValueError, match="Unknown sensitive attribute 'gender'"):
        load_adult(sensitive="gender")
    with pytest.raises(ValueError, match=r"not features of 'adult': \['salary'\]"):
        load_adult(drop=["salary"])
    with pytest.raises(TypeError, match="sensitive must be"):
        load_adult(sensitive=[])


def test_groups_have_their_names_and_the_papers_codes_one_call_away():
    data = load_adult(sensitive=("sex", "race"))
    assert data.sensitive_labels == {"sex": {0: "Female", 1: "Male"}}
    assert data.sensitive["sex"].dtype == object  # names, as metric names and reports show
    assert data.with_named_groups() is data  # nothing coded left to name
    codes = data.sensitive_codes
    assert codes["sex"].dtype == np.int64
    assert codes["sex"].tolist() == (data.sensitive["sex"] == "Male").astype(int).tolist()
    assert codes["race"].equals(data.sensitive["race"])  # a raw column is its own names


def test_a_hand_built_dataset_with_coded_groups_gets_their_names():
    data = load_adult(sensitive=("sex", "race"))
    coded = Dataset(data.X, data.y, data.sensitive_codes, "x", "", "",
                    sensitive_labels=data.sensitive_labels)  # fmt: skip
    named = coded.with_named_groups()
    assert named.sensitive.equals(data.sensitive)
    assert named.sensitive_codes.equals(data.sensitive_codes)
    assert named.X.equals(data.X) and named.y.equals(data.y)


def test_german_counts_rates_and_columns():
    data = load_german()
    assert data.n_samples == 1_000
    assert abs(data.positive_rate - 0.30) < 0.001
    assert list(data.X.columns) == GERMAN_FEATURES  # age stays a feature, as in the paper
    assert data.sensitive_codes["age"].sum() == 851
    assert _group_rates(data, "age") == {"under 25": 0.4094, "25 or older": 0.2808}
    assert data.X.isna().sum().sum() == 0
    assert data.positive_label.startswith("bad credit")


def test_german_sex_and_lee_setup_dimension():
    data = load_german(sensitive=["age", "sex"])
    assert "personal_status" not in data.X.columns
    assert data.sensitive["sex"].value_counts().to_dict() == {"Male": 690, "Female": 310}
    lee = load_german(drop="personal_status")
    paper = make_preprocessor(lee.X, min_category_count=1)  # every category, as in the paper
    assert paper.fit_transform(lee.X).shape == (1_000, 57)
    assert make_preprocessor(lee.X).fit_transform(lee.X).shape == (1_000, 54)  # rare pooled


def test_cached_parse_returns_copies():
    first = load_german()
    first.X.loc[0, "credit_amount"] = -1.0
    first.y.iloc[0] = 1 - first.y.iloc[0]
    second = load_german()
    assert second.X.loc[0, "credit_amount"] == 1169.0
    assert second.y.iloc[0] == 0


def test_explicit_data_dir_reads_external_copy(tmp_path):
    _bundled_copy(tmp_path, "uci-german", "german.data")
    external, bundled = load_german(data_dir=tmp_path), load_german()
    pd.testing.assert_frame_equal(external.X, bundled.X)
    pd.testing.assert_series_equal(external.y, bundled.y)
    # the folder that holds the file is taken too (its checksum is verified the same way)
    pd.testing.assert_frame_equal(load_german(data_dir=tmp_path / "uci-german").X, bundled.X)


@pytest.mark.parametrize(("subdir", "filename"), [("uci-german", "german.data")])
def test_corrupt_file_fails_checksum(tmp_path, subdir, filename):
    path = _bundled_copy(tmp_path, subdir, filename)
    content = bytearray(path.read_bytes())
    content[100] = ord("9") if content[100] != ord("9") else ord("8")
    path.write_bytes(bytes(content))
    with pytest.raises(ChecksumMismatchError) as info:
        load_german(data_dir=tmp_path)
    message = str(info.value)
    assert "b21f3d81db8071257d5ff1deaeba1fd4303b62712e6fcc9715c7a86202cb5871" in message
    assert "download it again" in message and isinstance(info.value, ValueError)


def test_corrupt_adult_test_fails_checksum(tmp_path):
    _bundled_copy(tmp_path, "uci-adult", "adult.data")
    path = _bundled_copy(tmp_path, "uci-adult", "adult.test")
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ChecksumMismatchError, match="expected a2a9044b"):
        load_adult(data_dir=tmp_path)


def test_missing_file_messages(tmp_path, monkeypatch):
    monkeypatch.delenv("FAIRPCA_DATA_DIR", raising=False)
    with pytest.raises(DatasetNotFoundError) as info:
        load_bank()
    assert "FAIRPCA_DATA_DIR is not set" in str(info.value)
    assert "FAIRPCA_DATA_DIR/uci-bank-marketing/bank-additional-full.csv" in str(info.value)
    monkeypatch.setenv("FAIRPCA_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        load_compas()
    message = str(info.value)
    assert str(tmp_path / "propublica-compas" / "compas-scores-two-years.csv") in message
    assert "github.com/propublica/compas-analysis" in message
    with pytest.raises(DatasetNotFoundError, match=r"archive\.ics\.uci\.edu"):
        load_adult(data_dir=tmp_path)
    with pytest.raises(DatasetNotFoundError, match="nick-jhlee/fair-manifold-pca"):
        load_lee2022_split("adult", 0)


def test_load_dataset_dispatch():
    assert DATASET_NAMES == ("adult", "german", "bank", "compas")
    assert load_dataset("German", sensitive="sex").sensitive.columns.tolist() == ["sex"]
    with pytest.raises(ValueError, match="load_user_data"):
        load_dataset("mnist")


def test_dataset_validation_and_summary():
    data = load_german()
    summary = data.summary()
    assert summary["n_samples"] == 1_000 and summary["groups"]["age"]["25 or older"]["count"] == 851
    assert "Dataset(name='german'" in repr(data)
    with pytest.raises(ValueError, match="same number of rows"):
        Dataset(data.X, data.y[:10], data.sensitive, "x", "", "")
    with pytest.raises(ValueError, match="0/1"):
        Dataset(data.X, data.y + 1, data.sensitive, "x", "", "")


# ------------------------------------------------------------- data from FAIRPCA_DATA_DIR


@pytest.mark.data
def test_bank_counts_and_rates():
    _external_dir("uci-bank-marketing/bank-additional-full.csv")
    data = load_bank()
    assert data.n_samples == 41_188 and data.X.shape[1] == 20
    assert abs(data.positive_rate - 0.113) < 0.001
    assert abs(data.sensitive_codes["age"].mean() - 0.423) < 0.001
    assert _group_rates(data, "age") == {"40 or under": 0.1145, "over 40": 0.1102}
    assert "emp_var_rate" in data.X.columns and data.X.isna().sum().sum() == 0


@pytest.mark.data
def test_compas_counts_rates_and_features():
    _external_dir("propublica-compas/compas-scores-two-years.csv")
    data = load_compas()
    assert data.n_samples == 7_214
    assert abs(data.positive_rate - 0.4507) < 1e-4
    assert (data.sensitive["race"] == "Caucasian").sum() == 2_454
    assert "race" not in data.X.columns and "decile_score" not in data.X.columns
    assert _group_rates(data, "race") == {"other race": 0.48, "Caucasian": 0.3936}
    filtered = load_compas(propublica_filter=True, drop="sex")
    assert filtered.n_samples == 6_172 and "sex" not in filtered.X.columns
    assert abs(filtered.positive_rate - 0.4551) < 1e-4
    with pytest.raises(ValueError, match=r"invalid: \['nope'\]"):
        load_compas(features=["age", "nope"])


@pytest.mark.data
@pytest.mark.parametrize(
    ("dataset", "n_train", "n_test", "dim"),
    [("adult", 1582, 679, 97), ("german", 700, 300, 57), ("compas", 1727, 741, 11)],
)
def test_lee2022_split_shapes(dataset, n_train, n_test, dim):
    _external_dir(f"lee2022-splits/{dataset}/train_0.csv.gz")
    for index in range(10):
        X_tr, y_tr, z_tr, X_te, y_te, z_te = load_lee2022_split(dataset, index)
        assert X_tr.shape == (n_train, dim) and X_te.shape == (n_test, dim)
        assert X_tr.dtype == np.float64 and y_tr.shape == z_tr.shape == (n_train,)
        assert set(np.unique(np.r_[y_tr, y_te, z_tr, z_te])) == {0, 1}
        assert y_te.shape == z_te.shape == (n_test,)


def _write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode()))


def test_lee2022_split_validation(tmp_path):
    rng = np.random.default_rng(0)
    rows = np.c_[rng.normal(size=(4, 11)), [0, 1, 1, 0], [1, 1, 0, 0]]
    body = "\n".join(",".join(f"{v:.17g}" for v in row) for row in rows)
    folder = tmp_path / "lee2022-splits" / "compas"
    _write_gz(folder / "train_2.csv.gz", "c" + ",c" * 12 + "\n" + body)  # header tolerated
    _write_gz(folder / "test_2.csv.gz", body)
    X_tr, y_tr, z_tr, *_ = load_lee2022_split("compas", 2, data_dir=tmp_path)
    np.testing.assert_array_equal(X_tr, rows[:, :11])
    np.testing.assert_array_equal(y_tr, [0, 1, 1, 0])
    np.testing.assert_array_equal(z_tr, [1, 1, 0, 0])
    _write_gz(folder / "test_2.csv.gz", "\n".join(",".join(["1"] * 12) for _ in range(3)))
    with pytest.raises(ValueError, match="expected rows of 13 columns"):
        load_lee2022_split("compas", 2, data_dir=tmp_path)
    (folder / "test_2.csv.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="not a readable gzip"):
        load_lee2022_split("compas", 2, data_dir=tmp_path)
    with pytest.raises(ValueError, match="between 0 and 9"):
        load_lee2022_split("compas", 10, data_dir=tmp_path)
    with pytest.raises(ValueError, match="choose one of"):
        load_lee2022_split("bank", 0, data_dir=tmp_path)


# -------------------------------------------------------------------------- user data


def _user_frame() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    n = 60
    return pd.DataFrame(
        {
            "income": rng.normal(50, 10, n),
            "city": rng.choice(["a", "b", "c"], n),
            "group": rng.choice(["g1", "g2"], n),
            "outcome": rng.choice(["yes", "no"], n),
            "count": rng.integers(0, 5, n),
        }
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_user_data_csv_and_parquet(tmp_path, suffix):
    frame = _user_frame()
    path = tmp_path / f"people{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    data = load_user_data(path, label="outcome", sensitive="group", positive_label="yes")
    assert data.name == "people" and data.n_samples == 60
    assert list(data.X.columns) == ["income", "city", "count"]
    assert data.X["count"].dtype == np.float64
    np.testing.assert_array_equal(data.y, (frame["outcome"] == "yes").astype(int))
    assert data.sensitive["group"].tolist() == frame["group"].tolist()
    subset = load_user_data(
        path, label="outcome", sensitive=["group"], positive_label="no", features=["city"]
    )
    assert list(subset.X.columns) == ["city"] and subset.y.sum() == (frame["outcome"] == "no").sum()


def test_user_data_binary_label_needs_no_positive_label(tmp_path):
    frame = _user_frame().assign(outcome=lambda f: (f["outcome"] == "yes").astype(int))
    frame.to_csv(tmp_path / "d.csv", index=False)
    data = load_user_data(tmp_path / "d.csv", label="outcome", sensitive="group")
    assert data.y.tolist() == frame["outcome"].tolist()


def test_a_sensitive_column_of_many_numbers_is_refused_with_the_fix(tmp_path):
    """Age as the sensitive attribute (40 values) is a measurement, not groups: it is refused
    before any work; a numeric column of a few codes (race 1-3) is groups."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"age": rng.integers(20, 60, 400), "race": rng.integers(1, 4, 400),
                          "x": rng.normal(size=400), "y": rng.integers(0, 2, 400)})  # fmt: skip
    frame.to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(ValueError, match=r"'age' holds numbers with 40 distinct values.*Bin it"):
        load_user_data(tmp_path / "d.csv", label="y", sensitive="age")
    assert (
        load_user_data(tmp_path / "d.csv", label="y", sensitive="race").sensitive.nunique()["race"]
        == 3
    )


def test_two_sensitive_columns_given_as_one_comma_list_are_told_apart(tmp_path):
    _user_frame().to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(ValueError, match=r"'group,city' names 2 columns: list them one by one"):
        load_user_data(tmp_path / "d.csv", label="outcome", sensitive="group,city")


def test_user_data_errors(tmp_path):
    frame = _user_frame()
    load = load_user_data
    with pytest.raises(FileNotFoundError, match="Data file not found"):
        load(tmp_path / "absent.csv", label="outcome", sensitive="group")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="is empty"):
        load(tmp_path / "empty.csv", label="outcome", sensitive="group")
    (tmp_path / "header.csv").write_text("outcome,group,x\n")
    with pytest.raises(ValueError, match="no data rows"):
        load(tmp_path / "header.csv", label="outcome", sensitive="group")
    (tmp_path / "data.txt").write_text("a\n1\n")
    with pytest.raises(ValueError, match="Unsupported file type"):
        load(tmp_path / "data.txt", label="a", sensitive="a")

    def write(frame: pd.DataFrame) -> Path:
        path = tmp_path / "bad.csv"
        frame.to_csv(path, index=False)
        return path

    path = write(frame)
    with pytest.raises(ValueError, match=r"\['target', 'gender'\] not found.*Available columns"):
        load(path, label="target", sensitive=["gender"])
    with pytest.raises(ValueError, match="must be distinct"):
        load(path, label="outcome", sensitive="outcome")
    with pytest.raises(ValueError, match=r"has the classes \['no', 'yes'\].*positive_label"):
        load(path, label="outcome", sensitive="group")
    with pytest.raises(ValueError, match="positive_label='maybe' does not occur"):
        load(path, label="outcome", sensitive="group", positive_label="maybe")
    with pytest.raises(ValueError, match=r"3 distinct value.*positive_label=<value>"):
        load(path, label="city", sensitive="group")
    with pytest.warns(LabelValuesWarning, match=r"'city' holds 3 distinct values.* 'b' \("):
        binarized = load(path, label="city", sensitive="group", positive_label="a")
    assert binarized.y.sum() == (frame["city"] == "a").sum()
    frame = frame.assign(outcome=(frame["outcome"] == "yes").astype(int))
    with pytest.raises(ValueError, match="'group' has a single value"):
        load(write(frame.assign(group="g1")), label="outcome", sensitive="group")
    with pytest.raises(ValueError, match="'group' has 1 missing value"):
        gap = frame.assign(group=frame["group"].where(frame.index != 3))
        load(write(gap), label="outcome", sensitive="group")
    nan_label = frame.assign(outcome=frame["outcome"].where(frame.index > 1))
    with pytest.raises(ValueError, match="'outcome' has 2 missing value"):
        load(write(nan_label), label="outcome", sensitive="group")


# ----------------------------------------------------------------------- preprocessing


def test_preprocessor_uses_training_statistics_only():
    rng = np.random.default_rng(7)
    X = pd.DataFrame(
        {
            "x": rng.normal(3.0, 2.0, 200),
            "flag": rng.random(200) < 0.5,
            "color": pd.Categorical(rng.choice(["red", "blue"], 200)),
            "constant": np.ones(200),
        }
    )
    train, test = X.iloc[:150], X.iloc[150:].copy()
    test.loc[test.index[0], "color"] = "blue"
    test["color"] = test["color"].astype(str)
    test.loc[test.index[1], "color"] = "green"  # unseen category -> all-zero one-hot
    prep = make_preprocessor(train).set_output(transform="pandas")
    prep.fit(train)
    out = prep.transform(test)
    mean, std = train["x"].mean(), train["x"].std(ddof=0)
    np.testing.assert_allclose(out["numeric__x"], (test["x"] - mean) / std, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["numeric__constant"], 0.0, atol=0)
    assert out.filter(like="categorical__color").iloc[1].sum() == 0
    assert set(out.columns) >= {"categorical__flag_True", "categorical__color_red"}
    fitted_on_train = prep.transform(train)["numeric__x"]
    assert abs(fitted_on_train.mean()) < 1e-12 and abs(fitted_on_train.std(ddof=0) - 1) < 1e-12


def test_preprocessor_imputes_numeric_nan_with_training_median():
    train = pd.DataFrame({"x": [1.0, 2.0, 10.0, np.nan], "c": ["a", None, "b", "a"]})
    prep = make_preprocessor(train, min_category_count=1).fit(train)
    out = prep.transform(pd.DataFrame({"x": [np.nan], "c": ["a"]}))
    filled = np.array([1.0, 2.0, 10.0, 2.0])
    expected = (2.0 - filled.mean()) / filled.std()
    assert out.shape == (1, 4) and np.isclose(out[0, -1], expected, rtol=0, atol=1e-12)


def test_preprocessor_rejects_bad_input():
    with pytest.raises(TypeError, match="pandas DataFrame"):
        make_preprocessor(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="no columns"):
        make_preprocessor(pd.DataFrame(index=range(3)))
    with pytest.raises(TypeError, match=r"Date/time columns \['when'\]"):
        make_preprocessor(pd.DataFrame({"when": pd.date_range("2020", periods=3)}))


def test_adult_pipeline_shapes():
    data = load_adult(sensitive=("sex", "race"))
    Z = make_preprocessor(data.X).fit_transform(data.X)
    assert Z.shape == (48_842, 92) and np.isfinite(Z).all()  # 101 with min_category_count=1


# ------------------------------------------------------------- reading within bounds


def _write_gzip_bomb(path: Path, gib: int = 10) -> None:
    """A ~10 MB ``.csv.gz`` that expands to ``gib`` GiB, written member by member: one
    compressed 64 MiB block of ``0,0`` rows, repeated (concatenated gzip members decompress
    to the concatenation), so neither the bomb nor its text is ever held in memory."""
    block = gzip.compress(b"0,0\n" * 2**24, compresslevel=9)
    with path.open("wb") as out:
        out.write(gzip.compress(b"a,b\n"))
        for _ in range(16 * gib):
            out.write(block)


@pytest.mark.slow
def test_gzip_bomb_stops_while_streaming_fast_and_small(tmp_path, failed_load):
    import resource

    bomb = tmp_path / "bomb.csv.gz"
    _write_gzip_bomb(bomb)
    assert bomb.stat().st_size < 12 * 10**6
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRPCA_MAX_")}
    seconds, kind, result, peak = failed_load(bomb, env, label="a", sensitive="b")
    refused = f"Data file {bomb} is refused before parsing: it expands to about "
    assert kind == "DataTooLargeError" and result.startswith(refused), result
    assert "raise FAIRPCA_MAX_READ_BYTES" in result, result
    print(f"bomb refused {seconds:.2f} s into reading, peak RSS {peak / 1e6:.0f} MB")
    assert seconds < 10 and peak < 10**9, (seconds, peak)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < 2 * 10**9


def test_read_budget_and_line_limit_are_settings(tmp_path, monkeypatch):
    from fairpca.datasets import DataTooLargeError

    path = tmp_path / "rows.csv.gz"
    with gzip.open(path, "wb") as out:
        out.write(b"x,s,y\n" + b"1.5,a,0\n2.5,b,1\n" * 50_000)  # 800,006 bytes of text
    monkeypatch.setenv("FAIRPCA_MAX_READ_BYTES", "800kB")
    with pytest.raises(
        DataTooLargeError,
        match=r"rows.csv.gz is refused before parsing: it expands to more than 800.0 kB of "
        r"text; raise FAIRPCA_MAX_READ_BYTES",
    ):
        load_user_data(path, label="y", sensitive="s", screen=False)
    monkeypatch.setenv("FAIRPCA_MAX_READ_BYTES", "801kB")
    assert load_user_data(path, label="y", sensitive="s", screen=False).n_samples == 100_000
    monkeypatch.setenv("FAIRPCA_MAX_LINE_BYTES", "6")  # the header has 5 bytes, rows 7
    with pytest.raises(DataTooLargeError, match="a line is longer than 6 bytes"):
        load_user_data(path, label="y", sensitive="s", screen=False)
    monkeypatch.setenv("FAIRPCA_MAX_LINE_BYTES", "7")
    assert load_user_data(path, label="y", sensitive="s", screen=False).n_samples == 100_000
    monkeypatch.setenv("FAIRPCA_MAX_READ_BYTES", "lots")
    with pytest.raises(ValueError, match="FAIRPCA_MAX_READ_BYTES='lots' is not a size"):
        load_user_data(path, label="y", sensitive="s", screen=False)


@pytest.mark.slow
def test_one_500_mb_line_is_refused_at_the_line_limit(tmp_path):
    import resource
    import time

    path = tmp_path / "one-line.csv"
    with path.open("wb") as out:
        out.write(b"a,b,y\n")
        for _ in range(500):
            out.write(b"1" * 10**6)
        out.write(b",x,1\n")
    started = time.perf_counter()
    with pytest.raises(
        ValueError,
        match=r"one-line.csv is refused before parsing: a line is longer than 16.8 MB; "
        r"check the separator",
    ):
        load_user_data(path, label="y", sensitive="b")
    seconds = time.perf_counter() - started
    assert seconds < 5, seconds  # the first 16 MiB of the line, not 500 MB
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < 2 * 10**9


# Writes a Parquet file of 40M rows in ONE row group: runs of constants (a feature of zeros,
# two groups and two labels in long runs) that compress to a few hundred kB, whose metadata
# declares under 1 MB uncompressed. In a child process: it holds the columns at once.
_WRITE_40M_ROWS = """
import sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
n, half = 40_000_000, 20_000_000
runs = np.repeat(np.array([0, 1], np.int8), half)
group = pa.DictionaryArray.from_arrays(runs, pa.array(["a", "b"]))
table = pa.table({"x1": np.zeros(n, np.int8), "group": group,
                  "approved": np.tile(np.repeat(np.array([0, 1], np.int8), half // 2), 2)})
pq.write_table(table, sys.argv[1], row_group_size=n, store_schema=False)
"""


@pytest.fixture(scope="module")
def parquet_of_40m_rows(tmp_path_factory) -> Path:
    import subprocess
    import sys

    import pyarrow.parquet as pq

    path = tmp_path_factory.mktemp("parquet") / "forty-million.parquet"
    subprocess.run([sys.executable, "-c", _WRITE_40M_ROWS, str(path)], check=True, timeout=300)
    meta = pq.ParquetFile(path).metadata
    assert path.stat().st_size < 10**6 and meta.num_rows == 40_000_000
    assert meta.num_row_groups == 1 and meta.row_group(0).total_byte_size < 10**6
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting, refusal",
    [
        # 440 MB as a table (the label and a feature as int8, the groups as strings)
        (("FAIRPCA_MEMORY_LIMIT", "512MiB"), "InsufficientMemoryError"),
        # 280 MB decoded (before: the 336 kB its metadata declares was checked)
        (("FAIRPCA_MAX_READ_BYTES", "100MB"), "DataTooLargeError"),
    ],
)
def test_a_small_parquet_file_of_40m_rows_stops_at_the_budget_it_crosses(
    parquet_of_40m_rows, failed_load, setting, refusal
):
    # The issue: a 1 MB Parquet file of 40M rows declared 10.7 MB uncompressed in its
    # metadata, which the budget trusted; the load took 36 s and peaked at 4.2 GB. It is read
    # in batches of a bounded number of rows (its one row group too), counted as it decodes.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRPCA_M")}
    env[setting[0]] = setting[1]
    seconds, kind, message, peak = failed_load(
        parquet_of_40m_rows, env, label="approved", sensitive="group"
    )
    assert kind == refusal, message
    assert setting[0] in message, message  # the setting to raise is named
    if refusal == "InsufficientMemoryError":  # the memory message of the CSV path
        assert message.startswith("Not enough memory: the table of data file forty-million.")
    print(f"refused {seconds:.2f} s into reading, peak RSS {peak / 1e6:.0f} MB")
    assert seconds < 10 and peak < 10**9, (seconds, peak)


def test_parquet_read_in_batches_is_the_table_pandas_reads(tmp_path, monkeypatch):
    """Batches of 100 rows over row groups of 700: the table of ``pandas.read_parquet``
    (categories, an index, missing values, text, times)."""
    from fairpca.datasets import _csv

    n = 3000
    frame = pd.DataFrame(
        {
            "x": np.arange(n, dtype=float),
            "count": pd.array(np.where(np.arange(n) % 7 == 0, None, np.arange(n)), "Int64"),
            "city": pd.Categorical(np.resize(["b", "a", "c"], n)),
            "note": np.where(np.arange(n) == 2000, None, np.resize(["x", "yy"], n)),
            "when": pd.date_range("2026-01-01", periods=n, freq="h", tz="UTC"),
            "group": np.resize(["g1", "g2"], n),
            "y": np.resize([0, 1, 1], n),
        },
        index=pd.Index(np.arange(n) * 2, name="person"),
    )
    path = tmp_path / "mixed.parquet"
    frame.to_parquet(path, row_group_size=700)
    monkeypatch.setattr(_csv, "TABLE_CHUNK_ROWS", 100)
    from fairpca.datasets._user import _read_parquet

    read = _read_parquet(path, lambda head, whole: None)
    pd.testing.assert_frame_equal(read, pd.read_parquet(path))


def test_duplicate_and_infinite_columns_are_refused_with_the_fix(tmp_path):
    path = tmp_path / "messy.csv"
    path.write_text("x,s, s,y\n1,a,b,0\n2,b,a,1\n3,a,a,0\n4,b,b,1\n")
    with pytest.raises(ValueError, match=r"names column\(s\) \['s'\] more than once .* with diff"):
        load_user_data(path, label="y", sensitive="s", screen=False)
    path.write_text("x,s, s,y\n1,a,a,0\n2,b,b,1\n3,a,a,0\n4,b,b,1\n")  # a repeated copy
    with pytest.warns(UserWarning, match=r"repeats column\(s\) \['s'\] with identical values"):
        data = load_user_data(path, label="y", sensitive="s", screen=False)
    assert data.X.columns.tolist() == ["x"]  # the copy is not kept as a feature
    path.write_text("x,z,w,s,y\n1,inf,5,a,0\n-inf,2,6,b,1\n3,1,7,a,0\n4,1,8,b,1\n")
    with pytest.raises(ValueError, match=re.escape("count per column): {'x': 1, 'z': 1}")):
        load_user_data(path, label="y", sensitive="s", screen=False)
    data = load_user_data(path, label="y", sensitive="s", drop=["x", "z"])  # the fix named
    assert data.X.columns.tolist() == ["w"]
