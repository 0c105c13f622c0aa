"""Mixed-content documents for typeseg's segmenter (SparseSSM's second test bed).

typeseg labels every character with its content type (python, json, html, …),
so a useful input mixes types. A document here is a run of ``chunk``-character
pieces, each cut at a random offset from a random file of a random type,
drawn from the text files of the running Python installation (its standard
library and its installed packages: ``.py``, ``.rst``, ``.json``, ``.c``/``.h``,
``.csv``, ``.js``, ``.html``, ``.css``, ``.md``, ``.txt``). Nothing is
downloaded; the pool depends on what is installed, so the experiment records
the per-type file counts and a digest of the file list. Files are split into two
disjoint pools by a hash of their relative path: ``calibration`` and ``test``
documents never share a file. Bytes outside typeseg's alphabet (printable ASCII,
tab, newline, carriage return) become its placeholder ``0xA4``, as its own
tokenizer does.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from flowerbed.data.base import DataSourceError

EXTENSIONS = (".py", ".rst", ".json", ".c", ".h", ".csv", ".js", ".html", ".css", ".md", ".txt")
#: typeseg's placeholder for a byte outside its alphabet.
PLACEHOLDER = 0xA4
MIN_BYTES = 600
MAX_BYTES = 400_000


def _allowed() -> np.ndarray:
    mask = np.zeros(256, dtype=bool)
    mask[0x20:0x7F] = True
    mask[[0x09, 0x0A, 0x0D, PLACEHOLDER]] = True
    return mask


ALLOWED = _allowed()


@dataclass(frozen=True)
class FilePool:
    """Text files by type (extension), as ``(root index, relative path)`` sorted lists."""

    roots: tuple[Path, ...]
    files: dict[str, list[tuple[int, str]]]

    def digest(self) -> str:
        """Short hash of the file list (what the documents were drawn from)."""
        text = "\n".join(f"{e}:{p}" for e in sorted(self.files) for _r, p in self.files[e])
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def counts(self) -> dict[str, int]:
        """Files per type."""
        return {e: len(v) for e, v in sorted(self.files.items())}


def _half(rel: str) -> Literal["calibration", "test"]:
    return "calibration" if hashlib.sha1(rel.encode()).digest()[0] % 2 == 0 else "test"


@lru_cache(maxsize=2)
def file_pool(split: Literal["calibration", "test"]) -> FilePool:
    """The installation's text files of ``split`` (half of them, by a hash of the path)."""
    paths = sysconfig.get_paths()
    roots = tuple(dict.fromkeys(Path(paths[k]) for k in ("stdlib", "purelib")))
    files: dict[str, list[tuple[int, str]]] = {e: [] for e in EXTENSIONS}
    for r, root in enumerate(roots):
        for f in root.rglob("*"):
            if f.suffix not in files:
                continue
            rel = f.relative_to(root).as_posix()
            if "__pycache__" in rel or _half(rel) != split:
                continue
            try:
                size = f.stat().st_size if f.is_file() else 0
            except OSError:
                continue
            if MIN_BYTES <= size <= MAX_BYTES:
                files[f.suffix].append((r, rel))
    files = {e: sorted(v) for e, v in files.items() if v}
    if len(files) < 2:
        raise DataSourceError("sparsessm typeseg documents: fewer than two file types found "
                              "in this Python installation")
    return FilePool(roots, files)


def sanitize(raw: bytes) -> np.ndarray:
    """Byte ids typeseg reads: bytes outside its alphabet become ``0xA4``."""
    arr = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
    arr[~ALLOWED[arr]] = PLACEHOLDER
    return arr


def mixed_documents(pool: FilePool, n_docs: int, length: int, seed: int,
                    chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """``n_docs`` documents of ``length`` byte ids ``(n_docs, length)`` and each byte's type index.

    Types are drawn uniformly, then a file of that type, then an offset.
    The type index refers to ``sorted(pool.files)``.
    """
    gen = np.random.default_rng([11, seed])
    types = sorted(pool.files)
    docs = np.zeros((n_docs, length), dtype=np.int64)
    kinds = np.zeros((n_docs, length), dtype=np.int64)
    for i in range(n_docs):
        pos = 0
        while pos < length:
            k = int(gen.integers(len(types)))
            r, rel = pool.files[types[k]][int(gen.integers(len(pool.files[types[k]])))]
            raw = (pool.roots[r] / rel).read_bytes()
            start = int(gen.integers(0, max(1, len(raw) - chunk)))
            piece = sanitize(raw[start : start + chunk])[: length - pos]
            docs[i, pos : pos + len(piece)] = piece
            kinds[i, pos : pos + len(piece)] = k
            pos += len(piece)
    return docs, kinds
