"""Readers for the offline text that Debian ships: WordNet 3.0, FreeDict, fortunes, stdlib code.

Pure parsers with no registration: :mod:`flowerbed.data.text_data` turns their
output into datasets. Every reader takes the folder it reads, so tests and
users can point at their own copy, and a missing file raises
:class:`~flowerbed.data.base.DataSourceError` naming the Debian package that
provides it.

File layouts (``dpkg -L``):

- ``wordnet-base``: ``/usr/share/wordnet/{data,index}.{noun,verb,adj,adv}`` and
  ``{noun,verb,adj,adv}.exc``; ``wordnet-sense-index``: ``index.sense``. Debian
  ships no ``lexnames`` file: :data:`LEXNAMES` is WordNet 3.0's fixed table.
- ``dict-freedict-<pair>``: ``/usr/share/dictd/freedict-<pair>.index`` (headword,
  base64 offset, base64 length) and ``.dict.dz`` (dictzip, which gzip reads).
- ``fortunes`` (+ ``fortunes-min``): ``/usr/share/games/fortunes/<category>``,
  quotes separated by lines holding only ``%``.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import sysconfig
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from flowerbed.data.base import DataSourceError

WORDNET_DIR = "/usr/share/wordnet"
DICTD_DIR = "/usr/share/dictd"
FORTUNES_DIR = "/usr/share/games/fortunes"

#: WordNet 3.0 lexicographer files, indexed by the ``lex_filenum`` of data.* lines.
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal",
    "noun.artifact", "noun.attribute", "noun.body", "noun.cognition", "noun.communication",
    "noun.event", "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive",
    "noun.object", "noun.person", "noun.phenomenon", "noun.plant", "noun.possession",
    "noun.process", "noun.quantity", "noun.relation", "noun.shape", "noun.state",
    "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition",
    "verb.communication", "verb.competition", "verb.consumption", "verb.contact",
    "verb.creation", "verb.emotion", "verb.motion", "verb.perception", "verb.possession",
    "verb.social", "verb.stative", "verb.weather", "adj.ppl",
)
#: data.*/index.* file suffix of each part-of-speech letter (satellites ``s`` live in adj).
POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
#: Part of speech of a pointer's target, or of a sense key's ss_type digit.
_POS_OF = {"n": "n", "v": "v", "a": "a", "s": "a", "r": "r",
           "1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}
#: A single lowercase word (no space, underscore, hyphen, digit or apostrophe).
SINGLE_WORD = re.compile(r"[a-z]+")


def known_lexnames(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` if every one is a WordNet lexicographer file, else a ValueError listing them."""
    unknown = sorted(set(names) - set(LEXNAMES))
    if unknown:
        raise ValueError(f"unknown lexicographer files {unknown}; known: {LEXNAMES}")
    return names


def missing(dataset: str, path: Path | str, package: str, param: str) -> DataSourceError:
    """The one-line error for a file a Debian package provides."""
    return DataSourceError(
        f"{dataset}: {path} not found; install the Debian package {package} "
        f"(apt-get install {package}) or set dataset.{param}"
    )


def require_files(folder: str, names: list[str], dataset: str, package: str, param: str) -> None:
    """Raise the one-line :func:`missing` error for the first of ``names`` not in ``folder``."""
    for name in names:
        if not (Path(folder) / name).is_file():
            raise missing(dataset, Path(folder) / name, package, param)


def _lines(path: Path) -> list[str]:
    """Lines of a WordNet file, without its license header (lines starting with spaces)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        return [line for line in fh if not line.startswith(" ")]


# --- WordNet -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pointer:
    """One data.* pointer: ``symbol`` (``!`` antonym, ``@`` hypernym...), target, words.

    ``source``/``target`` are 1-based word numbers in the two synsets, 0 for a
    semantic pointer (between whole synsets).
    """

    symbol: str
    pos: str
    offset: int
    source: int
    target: int


@dataclass(frozen=True)
class Synset:
    """One data.* line: lexicographer file, lemmas (lowercase, ``_`` for spaces), gloss."""

    lexfile: int
    lemmas: tuple[str, ...]
    pointers: tuple[Pointer, ...]
    gloss: str


@dataclass(frozen=True)
class IndexEntry:
    """One index.* line: the lemma's synsets (most frequent sense first) and tag count.

    ``tag_count`` is index.*'s ``tagsense_cnt``: how many of the lemma's senses
    are tagged in the semantic concordances (0 for rare words).
    """

    offsets: tuple[int, ...]
    tag_count: int


@dataclass(frozen=True)
class WordNet:
    """The parsed database: synsets by ``(pos, offset)``, index entries by ``(pos, lemma)``."""

    synsets: dict[tuple[str, int], Synset]
    index: dict[tuple[str, str], IndexEntry]

    def lexfile(self, pos: str, lemma: str) -> str:
        """Lexicographer file of the lemma's most frequent sense."""
        entry = self.index[(pos, lemma)]
        return LEXNAMES[self.synsets[(pos, entry.offsets[0])].lexfile]

    def tag_count(self, pos: str, lemma: str) -> int:
        """The lemma's index.* ``tagsense_cnt`` (0 when it is not a lemma of ``pos``)."""
        entry = self.index.get((pos, lemma))
        return 0 if entry is None else entry.tag_count


def _lemma(word: str) -> str:
    """data.* word to index form: lowercase, adjective marker ``(a)``/``(p)``/``(ip)`` dropped."""
    return re.sub(r"\([a-z]+\)$", "", word).lower()


def parse_data_line(line: str) -> tuple[int, Synset]:
    """``(offset, Synset)`` of one data.* line.

    Layout: ``offset lex_filenum ss_type w_cnt(hex) [word lex_id]... p_cnt
    [symbol offset pos source/target(hex)]... [frames] | gloss``.

    Examples
    --------
    >>> off, s = parse_data_line(
    ...     "00002098 00 a 01 unable 0 002 = 05200169 n 0000 ! 00001740 a 0101 | not able")
    >>> off, s.lemmas, s.pointers[1].symbol, s.pointers[1].offset, s.gloss
    (2098, ('unable',), '!', 1740, 'not able')
    """
    head, _, gloss = line.partition(" | ")
    f = head.split()
    count = int(f[3], 16)
    lemmas = tuple(_lemma(f[4 + 2 * i]) for i in range(count))
    at = 4 + 2 * count
    pointers = []
    for _ in range(int(f[at])):
        sym, off, pos, st = f[at + 1 : at + 5]
        pointers.append(Pointer(sym, _POS_OF[pos], int(off), int(st[:2], 16), int(st[2:], 16)))
        at += 4
    return int(f[0]), Synset(int(f[1]), lemmas, tuple(pointers), gloss.strip())


def load_wordnet(root: str, dataset: str = "wordnet") -> WordNet:
    """Parse data.* and index.* under ``root`` (cached per folder; about 2 s)."""
    names = [f"{kind}.{suffix}" for suffix in POS_FILES.values() for kind in ("data", "index")]
    require_files(root, names, dataset, "wordnet-base", "wordnet_dir")
    return _parse_wordnet(root)


@functools.lru_cache(maxsize=2)
def _parse_wordnet(root: str) -> WordNet:
    folder = Path(root)
    synsets: dict[tuple[str, int], Synset] = {}
    index: dict[tuple[str, str], IndexEntry] = {}
    for pos, suffix in POS_FILES.items():
        for line in _lines(folder / f"data.{suffix}"):
            offset, synset = parse_data_line(line)
            synsets[(pos, offset)] = synset
        for line in _lines(folder / f"index.{suffix}"):
            f = line.split()
            n_senses, n_ptr = int(f[2]), int(f[3])
            tag_count = int(f[5 + n_ptr])
            offsets = tuple(int(o) for o in f[6 + n_ptr : 6 + n_ptr + n_senses])
            index[(pos, f[0])] = IndexEntry(offsets, tag_count)
    return WordNet(synsets, index)


def synset_tag_counts(root: str, dataset: str = "wordnet") -> dict[tuple[str, int], int]:
    """Tagged occurrences per synset: index.sense ``tag_cnt`` summed over its senses."""
    require_files(root, ["index.sense"], dataset, "wordnet-sense-index", "wordnet_dir")
    return _parse_sense_index(root)


@functools.lru_cache(maxsize=2)
def _parse_sense_index(root: str) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for line in _lines(Path(root) / "index.sense"):
        key, offset, _, tags = line.split()
        counts[(_POS_OF[key.split("%")[1][0]], int(offset))] += int(tags)
    return dict(counts)


def definition(gloss: str) -> str:
    """A gloss without its quoted usage examples (``def; "example"; "example"``).

    Examples
    --------
    >>> definition('a young person; "the kids played"; "a gang of kids"')
    'a young person'
    """
    return re.split(r';\s*"', gloss, maxsplit=1)[0].strip()


def _add(refs: list[str], word: str) -> None:
    if word not in refs:
        refs.append(word)


def antonyms(wn: WordNet) -> dict[str, list[str]]:
    """Adjective antonyms from data.adj ``!`` pointers, lemma level, both directions.

    ``out[w]`` lists every lemma some sense of ``w`` is an antonym of, the
    antonyms of its most frequent sense first (WordNet ties antonyms to one
    sense: big -> little, small; keep all as references).
    """
    out: dict[str, list[str]] = defaultdict(list)
    for (pos, lemma), entry in wn.index.items():
        if pos != "a":
            continue
        for offset in entry.offsets:
            synset = wn.synsets[("a", offset)]
            for p in synset.pointers:
                if p.symbol != "!" or (p.source and synset.lemmas[p.source - 1] != lemma):
                    continue
                target = wn.synsets[(p.pos, p.offset)].lemmas
                for word in target if p.target == 0 else target[p.target - 1 : p.target]:
                    _add(out[lemma], word)
    for lemma, refs in list(out.items()):  # both directions, should a pointer lack its pair
        for word in refs:
            _add(out[word], lemma)
    return dict(out)


def hypernyms(wn: WordNet) -> dict[str, list[str]]:
    """Noun -> lemmas of its senses' hypernyms (``@``) and instance hypernyms (``@i``).

    Senses in frequency order, then each hypernym synset's lemmas in order.
    """
    out: dict[str, list[str]] = {}
    for (pos, lemma), entry in wn.index.items():
        if pos != "n":
            continue
        refs: list[str] = []
        for offset in entry.offsets:
            for p in wn.synsets[("n", offset)].pointers:
                if p.symbol in ("@", "@i"):
                    for word in wn.synsets[(p.pos, p.offset)].lemmas:
                        _add(refs, word)
        if refs:
            out[lemma] = refs
    return out


def read_exceptions(root: str, pos: str, dataset: str = "wordnet") -> dict[str, list[str]]:
    """``{pos}.exc`` as ``inflected form -> base forms`` (e.g. ``mice -> [mouse]``)."""
    name = f"{POS_FILES[pos]}.exc"
    require_files(root, [name], dataset, "wordnet-base", "wordnet_dir")
    out: dict[str, list[str]] = {}
    for line in _lines(Path(root) / name):
        form, *bases = line.split()
        if bases:
            out[form] = bases
    return out


def plurals(root: str, dataset: str = "wordnet") -> dict[str, list[str]]:
    """Singular -> irregular plurals, inverted from noun.exc (``mouse -> [mice]``)."""
    out: dict[str, list[str]] = defaultdict(list)
    for form, bases in read_exceptions(root, "n", dataset).items():
        for base in bases:
            _add(out[base], form)
    return dict(out)


def is_past_form(form: str) -> bool:
    """Whether a verb.exc form can be a past tense or participle.

    verb.exc also lists ``-ing`` forms (``lying``) and present forms (``is``,
    ``has``, ``caddies``); past forms never end in ``s`` except ``was``.

    Examples
    --------
    >>> [f for f in ["went", "gone", "lying", "is", "was", "am", "caddies"] if is_past_form(f)]
    ['went', 'gone', 'was']
    """
    if form.endswith("ing") or form in ("am", "are"):
        return False
    return form == "was" or not form.endswith("s")


def past_tenses(root: str, dataset: str = "wordnet") -> dict[str, list[str]]:
    """Verb -> irregular past forms from verb.exc (``go -> [gone, went]``).

    verb.exc does not tell the simple past from the past participle, so both
    are acceptable outputs; ``-ing`` and present forms are left out.
    """
    out: dict[str, list[str]] = defaultdict(list)
    for form, bases in read_exceptions(root, "v", dataset).items():
        if is_past_form(form):
            for base in bases:
                _add(out[base], form)
    return dict(out)


# --- FreeDict (dictd format) ---------------------------------------------------------------

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64_number(text: str) -> int:
    """A dictd index number: base64 digits, most significant first (``"BA"`` = 64).

    Examples
    --------
    >>> b64_number("B"), b64_number("BA"), b64_number("c/")
    (1, 64, 1855)
    """
    value = 0
    for char in text:
        value = value * 64 + _B64.index(char)
    return value


def freedict_pairs(folder: str = DICTD_DIR) -> tuple[str, ...]:
    """Language pairs installed in ``folder`` (``eng-fra``...), from ``freedict-*.index``."""
    path = Path(folder)
    if not path.is_dir():
        return ()
    return tuple(sorted(p.name[len("freedict-") : -len(".index")]
                        for p in path.glob("freedict-*.index")))


def _translations(body: list[str]) -> list[str]:
    """Translations of one entry's sense lines (``1. réunir, assembler``), in listed order."""
    out: list[str] = []
    for line in body:
        for item in re.sub(r"^\d+\.\s*", "", line.strip()).split(","):
            item = item.strip()
            if item and "..." not in item:
                _add(out, item)
    return out


def read_freedict(folder: str, pair: str, dataset: str = "freedict") -> dict[str, list[str]]:
    """Headword (as the entry writes it) -> every listed translation, in order.

    Entries sharing a headword are merged; the ``00database*`` entries and
    translations holding ``...`` (phrase templates) are skipped.
    """
    names = [f"freedict-{pair}.index", f"freedict-{pair}.dict.dz"]
    require_files(folder, names, dataset, f"dict-freedict-{pair}", "dictd_dir")
    return _parse_freedict(folder, pair)


@functools.lru_cache(maxsize=4)
def _parse_freedict(folder: str, pair: str) -> dict[str, list[str]]:
    with gzip.open(Path(folder, f"freedict-{pair}.dict.dz"), "rb") as fh:
        raw = fh.read()
    out: dict[str, list[str]] = defaultdict(list)
    with open(Path(folder, f"freedict-{pair}.index"), encoding="utf-8") as fh:
        for line in fh:
            word, offset, length = line.rstrip("\n").split("\t")
            if word.startswith("00database"):
                continue
            start = b64_number(offset)
            lines = raw[start : start + b64_number(length)].decode("utf-8").split("\n")
            headword = re.sub(r"\s*/[^/]*/\s*$", "", lines[0]).strip()  # drop "/ipa/"
            for item in _translations(lines[1:]):
                _add(out[headword], item)
    return {k: v for k, v in out.items() if v}


# --- fortunes and code ---------------------------------------------------------------------


def fortune_categories(folder: str) -> tuple[str, ...]:
    """Category files in ``folder`` (the strfile ``.dat`` and ``.u8`` links left out)."""
    path = Path(folder)
    if not path.is_dir():
        return ()
    return tuple(sorted(
        p.name for p in path.iterdir() if p.is_file() and not p.is_symlink() and "." not in p.name
    ))


def read_fortunes(folder: str, dataset: str = "fortunes") -> dict[str, tuple[str, ...]]:
    """Category -> its quotes (split on ``%`` lines, blank ones dropped), in file order."""
    if not fortune_categories(folder):
        raise missing(dataset, Path(folder) / "<category>", "fortunes", "fortunes_dir")
    return _parse_fortunes(folder)


@functools.lru_cache(maxsize=2)
def _parse_fortunes(folder: str) -> dict[str, tuple[str, ...]]:
    out = {}
    for name in fortune_categories(folder):
        text = (Path(folder) / name).read_text(encoding="utf-8", errors="replace")
        quotes = (q.strip("\n").rstrip() for q in re.split(r"^%\n", text, flags=re.MULTILINE))
        out[name] = tuple(q for q in quotes if q.strip())
    return out


#: Standard-library folders left out of the code corpus (tests, vendored and GUI code).
_CODE_SKIP = frozenset({
    "site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3",
    "__pycache__", "turtledemo", "ensurepip", "tkinter",
})


@functools.lru_cache(maxsize=2)
def stdlib_sources(count: int) -> dict[str, str]:
    """``count`` standard-library ``.py`` files (relative path -> text), evenly spaced.

    The interpreter's own stdlib (``sysconfig.get_paths()["stdlib"]``), tests
    and vendored packages left out, sorted by path; every ``k``-th file is
    taken so the choice spans the library and depends only on the Python
    installation, not on a seed.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _CODE_SKIP and not d.startswith("config-")]
        files += [Path(folder, n) for n in names if n.endswith(".py")]
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    if not files:
        raise DataSourceError(f"text_corpus: no .py files under the stdlib folder {root}")
    step = max(1, len(files) // count)
    chosen = files[::step][:count]
    return {
        p.relative_to(root).as_posix(): p.read_text(encoding="utf-8", errors="replace")
        for p in chosen
    }
