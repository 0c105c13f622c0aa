"""Offline text datasets: parsing facts from the real Debian files, sampling, partitions, errors.

The reference numbers come from a feasibility measurement made before this implementation
(not in this repository), measured independently on the same packages (wordnet-base
1:3.0-37, fortunes 1:1.99.1-7.3, dict-freedict-eng-fra 2022.04.21-1). ``scripts/setup.sh``
installs them; without them the tests that read them skip.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from data_helpers import build_dataset, build_partition

from flowerbed.core.scenario import load_scenario
from flowerbed.data import text_data_readers as rd
from flowerbed.data.base import DataSourceError
from flowerbed.data.federated import federated_data
from flowerbed.data.text_data import apportion, band_of, pick_rows
from flowerbed.data.text_data_corpus import CorpusParams, corpus_streams
from flowerbed.platform.inspect import client_stats


def _installed(path: str, package: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not Path(path).exists(), reason=f"Debian {package} not installed (scripts/setup.sh)"
    )


needs_wordnet = _installed(f"{rd.WORDNET_DIR}/data.noun", "wordnet-base")
needs_sense_index = _installed(f"{rd.WORDNET_DIR}/index.sense", "wordnet-sense-index")
needs_fortunes = _installed(f"{rd.FORTUNES_DIR}/computers", "fortunes")
needs_freedict = _installed(f"{rd.DICTD_DIR}/freedict-eng-fra.index", "dict-freedict-eng-fra")


@pytest.fixture(scope="module")
def wn() -> rd.WordNet:
    return rd.load_wordnet(rd.WORDNET_DIR)


# --- parsing against independent references ------------------------------------------------


@needs_wordnet
def test_wordnet_counts_and_glosses(wn):
    assert len(wn.synsets) == 117_659  # noun 82,115 + verb 13,767 + adj 18,156 + adv 3,621
    assert wn.lexfile("n", "dog") == "noun.animal"
    assert wn.lexfile("v", "run") == "verb.motion"
    first = wn.synsets[("n", wn.index[("n", "dog")].offsets[0])]
    assert rd.definition(first.gloss).startswith("a member of the genus Canis")
    assert rd.LEXNAMES[first.lexfile] == "noun.animal" and len(rd.LEXNAMES) == 45


@needs_wordnet
def test_adjective_antonyms_match_the_feasibility_counts(wn):
    """3,668 directed = 1,834 unordered lemma pairs; 3,546 single-word; 112 with tags >= 3."""
    table = rd.antonyms(wn)
    directed = {(a, b) for a, refs in table.items() for b in refs}
    assert len(directed) == 3668
    assert len({frozenset(p) for p in directed}) == 1834
    assert all((b, a) in directed for a, b in directed)
    assert sum(bool(rd.SINGLE_WORD.fullmatch(a + b)) for a, b in directed) == 3546
    frequent = [p for p in directed if min(wn.tag_count("a", w) for w in p) >= 3]
    assert len(frequent) == 112
    assert "bad" in table["good"] and "good" in table["bad"]
    assert table["hot"] == ["cold"]


@needs_wordnet
def test_exception_lists_and_hypernyms(wn):
    assert rd.read_exceptions(rd.WORDNET_DIR, "n")["mice"] == ["mouse"]
    assert rd.plurals(rd.WORDNET_DIR)["mouse"] == ["mice"]
    assert rd.read_exceptions(rd.WORDNET_DIR, "v")["went"] == ["go"]
    past = rd.past_tenses(rd.WORDNET_DIR)
    assert "went" in past["go"] and set(past["be"]) == {"was", "were", "been"}
    assert not any(f.endswith("ing") for forms in past.values() for f in forms)
    assert {"canine", "domestic_animal"} <= set(rd.hypernyms(wn)["dog"])


@needs_freedict
def test_freedict_keeps_every_listed_translation():
    table = rd.read_freedict(rd.DICTD_DIR, "eng-fra")
    assert table["abandon"] == [
        "abdiquer", "abandonner", "délaisser", "livrer", "quitter", "renoncer", "résigner",
    ]
    assert table["good"] == ["bon", "intérêt"]
    assert "eng-fra" in rd.freedict_pairs()
    lines = Path(rd.DICTD_DIR, "freedict-eng-fra.index").read_text(encoding="utf-8").splitlines()
    assert sum(not w.startswith("00database") for w in lines) == 8799  # entries, as measured


@needs_fortunes
def test_fortunes_split_on_percent_lines():
    table = rd.read_fortunes(rd.FORTUNES_DIR)
    assert {"computers", "people", "pratchett"} <= set(table)
    assert len(table["pratchett"]) == 2
    assert all("Terry Pratchett" in q and "\n%" not in q for q in table["pratchett"])
    assert sum(map(len, table.values())) > 15_000


# --- sampling helpers ----------------------------------------------------------------------


def test_apportion_and_pick_rows_keep_every_key():
    """Sizes 90/9/1 and 20 rows: proportional, but the 1-item key still gets its row."""
    a = apportion(np.array([90, 9, 1]), 20, np.ones(3, int), np.array([90, 9, 1]))
    assert a.tolist() == [17, 2, 1]
    keys = ["a"] * 90 + ["b"] * 9 + ["c"]
    tr, te = pick_rows(keys, 16, 4, seed=0, label="t")
    assert len(tr) == 16 and len(te) == 4 and not set(tr) & set(te)
    assert {keys[i] for i in tr} == {"a", "b", "c"}
    again = pick_rows(keys, 16, 4, seed=0, label="t")
    other = pick_rows(keys, 16, 4, seed=1, label="t")
    assert np.array_equal(tr, again[0]) and not np.array_equal(tr, other[0])
    assert band_of(0, (1, 3, 10)) == "tags 0" and band_of(9, (1, 3, 10)) == "tags 3-9"


# --- datasets ------------------------------------------------------------------------------


@needs_wordnet
@needs_sense_index
def test_supersense_labels_and_side_table():
    data = build_dataset("wordnet_supersense", lexnames=["noun.animal", "noun.plant"],
                         n_train=100_000, n_test=0)
    assert data.meta.class_names == ("noun.animal", "noun.plant")
    assert data.text_train is not None and len(data.text_train) == len(data.y_train) == 15_539
    assert np.array_equal(data.x_train[:, 0], np.arange(len(data.y_train)))
    dog = [i for i, t in enumerate(data.text_train) if t.startswith("a member of the genus Canis")]
    assert dog and data.y_train[dog[0]] == 0
    full = build_dataset("wordnet_supersense")
    assert full.meta.num_classes == 45 and len(full.y_train) == 4000 and len(full.y_test) == 1000
    assert set(full.groups_train) == {"tags 0", "tags 1-2", "tags 3-9", "tags 10+"}


@needs_wordnet
@pytest.mark.parametrize(("relation", "word", "output"), [
    ("antonym", "good", "bad"), ("plural", "mouse", "mice"), ("past_tense", "go", "went"),
    ("hypernym", "dog", "canine"),
])
def test_pairs_keep_all_references(relation, word, output):
    data = build_dataset("wordnet_pairs", relation=relation, n_train=100_000, n_test=0)
    assert data.text_train is not None and data.refs_train is not None
    row = data.text_train.index(word)
    assert output in data.refs_train[row]
    assert len(data.refs_train) == len(data.text_train) == len(data.groups_train)
    assert data.meta.class_names[data.y_train[row]] == data.groups_train[row]


@needs_wordnet
def test_pair_frequency_filter_and_keys():
    rare = build_dataset("wordnet_pairs", min_tag_count=0, n_train=100_000, n_test=0)
    common = build_dataset("wordnet_pairs", min_tag_count=3, n_train=100_000, n_test=0)
    assert len(common.y_train) < len(rare.y_train)
    assert set(common.groups_train) <= {"tags 3-9", "tags 10+"}
    nouns = build_dataset("wordnet_pairs", relation="hypernym")
    assert all(str(g).startswith("noun.") for g in nouns.groups_train)


@needs_freedict
@needs_wordnet
def test_freedict_dataset_groups_by_part_of_speech():
    data = build_dataset("freedict", n_train=100_000, n_test=0)
    assert data.text_train is not None and data.refs_train is not None
    row = data.text_train.index("abandon")
    assert len(data.refs_train[row]) == 7
    assert set(data.groups_train) <= {"noun", "verb", "adj", "adv", "other"}
    assert data.meta.class_names[data.y_train[data.text_train.index("dog")]] == "noun"


@needs_fortunes
def test_fortunes_partition_is_deterministic_and_natural():
    data = build_dataset("fortunes", seed=0)
    keys = set(data.groups_train)
    assert len(keys) == len(rd.read_fortunes(rd.FORTUNES_DIR)) == data.meta.num_classes
    part = build_partition("natural_id", data, len(keys), seed=0)
    for rows in part.indices:
        assert len(set(data.groups_train[rows])) == 1
        assert len(set(data.y_train[rows])) == 1  # key = category = label
    again = build_partition("natural_id", build_dataset("fortunes", seed=0), len(keys), seed=0)
    other_data = build_dataset("fortunes", seed=1)
    other = build_partition("natural_id", other_data, len(keys), seed=1)
    assert set(other_data.groups_train) == keys  # same clients for every seed
    assert all(np.array_equal(a, b) for a, b in zip(part.indices, again.indices, strict=True))
    assert data.text_train != other_data.text_train
    assert any(not np.array_equal(a, b) for a, b in zip(part.indices, other.indices, strict=True))
    dirichlet = build_partition("dirichlet", data, 5, seed=0, alpha=0.5)
    assert sum(map(len, dirichlet.indices)) == len(data.y_train)


@needs_fortunes
def test_client_data_carries_its_texts(tmp_path):
    path = tmp_path / "fortunes.yaml"
    path.write_text(
        "name: t\nseed: 0\nnum_clients: 3\nrounds: 1\n"
        "dataset: {name: fortunes, categories: [tao, zippy, linux], n_train: 200, n_test: 20}\n"
        "partition: {name: natural_id}\nlearner: {name: sklearn}\n"
        "strategy: {name: local}\nengine: {name: inline}\n"
    )
    fed = federated_data(load_scenario(str(path)))
    ds = fed.dataset
    assert ds.text_train is not None
    for pid in range(3):
        client = fed.client(pid)
        assert client.text_train == tuple(ds.text_train[i] for i in fed.local_train[pid])
        assert client.text_test == tuple(ds.text_train[i] for i in fed.local_test[pid])
        assert client.refs_train is None and len(client.text_train) == client.num_train
    pooled = fed.pooled_client()
    assert pooled.text_train is not None and len(pooled.text_train) == len(pooled.y_train)
    rows = client_stats(fed)
    assert all(r["text"].startswith("avg ") for r in rows)


def test_datasets_without_text_keep_none():
    fed = federated_data(load_scenario("scenarios/quickstart.yaml", ["partition=iid"]))
    assert fed.dataset.text_train is None and fed.client(0).text_train is None
    assert fed.pooled_client().refs_test is None


# --- text_corpus ---------------------------------------------------------------------------


def test_code_corpus_windows_are_byte_substrings():
    """The code source needs no Debian package: the interpreter's own stdlib."""
    params = {"sources": ["code"], "window": 16, "code_files": 5, "n_train": 50, "n_test": 10,
              "group_by": "category"}
    data = build_dataset("text_corpus", **params)
    assert data.meta.task == "language_modeling" and data.meta.num_classes == 256
    assert data.x_train.dtype == np.int64 and data.x_train.shape == (50, 17)
    assert data.x_test.shape == (10, 17) and not data.y_train.any()
    assert data.x_train.min() >= 0 and data.x_train.max() <= 255
    streams = corpus_streams(CorpusParams(**params))
    assert len(set(data.groups_train)) == 5 == len(streams)
    for row, key in zip(data.x_train, data.groups_train, strict=True):
        assert bytes(row.astype(np.uint8)) in streams[key].encode("utf-8")


@needs_wordnet
@needs_fortunes
def test_corpus_sources_are_clients():
    data = build_dataset("text_corpus")
    assert data.x_train.shape == (4000, 65)
    assert set(data.groups_train) == {"glosses", "fortunes", "code"}
    streams = {k: v.encode("utf-8") for k, v in corpus_streams(CorpusParams()).items()}
    for i in range(0, 4000, 97):
        assert bytes(data.x_train[i].astype(np.uint8)) in streams[data.groups_train[i]]
    again = build_dataset("text_corpus")
    assert np.array_equal(data.x_train, again.x_train)
    assert not np.array_equal(data.x_train, build_dataset("text_corpus", seed=1).x_train)


# --- missing packages ----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "params", "package"), [
    ("wordnet_supersense", {"wordnet_dir": "EMPTY"}, "wordnet-base"),
    ("wordnet_pairs", {"wordnet_dir": "EMPTY", "relation": "plural"}, "wordnet-base"),
    ("freedict", {"dictd_dir": "EMPTY"}, "dict-freedict-eng-fra"),
    ("freedict", {"dictd_dir": "EMPTY", "pair": "eng-deu"}, "dict-freedict-eng-deu"),
    ("fortunes", {"fortunes_dir": "EMPTY"}, "fortunes"),
    ("text_corpus", {"fortunes_dir": "EMPTY", "sources": ["fortunes"]}, "fortunes"),
])
def test_missing_package_names_the_apt_fix(tmp_path, name, params, package):
    params = {k: str(tmp_path) if v == "EMPTY" else v for k, v in params.items()}
    with pytest.raises(DataSourceError, match=f"apt-get install {package}\\)") as err:
        build_dataset(name, **params)
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)


def test_missing_sense_index_names_its_package(tmp_path):
    with pytest.raises(DataSourceError, match="apt-get install wordnet-sense-index"):
        rd.synset_tag_counts(str(tmp_path))
