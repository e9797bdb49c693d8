"""Shared fixtures: the vectors of shared/vectors (found as ../shared/vectors beside the
repository root, as the Rust tests find them, or in $PROOFKIT_VECTORS) and one RandomX cache per
key for the whole session (each is 256 MiB and takes about a second to build)."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from proofkit import randomx

REPO = pathlib.Path(__file__).resolve().parents[2]


def vectors_dir() -> pathlib.Path:
    env = os.environ.get("PROOFKIT_VECTORS")
    return pathlib.Path(env) if env else REPO.parent / "shared" / "vectors"


def load_vectors(name: str) -> dict:
    p = vectors_dir() / name
    if not p.is_file():
        pytest.skip(f"skipped: vectors not found at {p} (set PROOFKIT_VECTORS)")
    with open(p) as f:
        return json.load(f)


def field_bytes(v: dict, name: str) -> bytes:
    """`name` as UTF-8 text, or `name_hex` as hex (the vectors' convention)."""
    if name in v:
        return v[name].encode()
    return bytes.fromhex(v[name + "_hex"])


@pytest.fixture(scope="session")
def rx_vectors() -> dict:
    return load_vectors("randomx.json")


@pytest.fixture(scope="session")
def eq_vectors() -> dict:
    return load_vectors("equihash.json")


@pytest.fixture(scope="session")
def vdf_vectors() -> dict:
    return load_vectors("vdf.json")


_caches: dict = {}


@pytest.fixture(scope="session")
def rx_cache():
    """rx_cache(key) -> an initialised proofkit Cache with the recommended flags."""

    def get(key: bytes) -> randomx.Cache:
        if key not in _caches:
            c = randomx.Cache(randomx.get_flags())
            c.init(key)
            _caches[key] = c
        return _caches[key]

    return get
