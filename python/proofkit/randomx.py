"""RandomX (Monero's proof of work), v1 and v2, light and fast mode.

The classes follow cyrx's API, so that cyrx code switches by changing the import::

    from proofkit.randomx import get_flags, Cache, VM, FLAG_V2

    flags = get_flags()
    cache = Cache(flags)
    cache.init(b"RandomX example key")
    vm = VM(flags, cache=cache)
    vm.hash(b"RandomX example input")

``CYRX_FLAG_*`` aliases of the ``FLAG_*`` constants are provided too. Fast mode builds a 2080 MiB
:class:`Dataset` (``Dataset(flags, cache, threads=..., progress=...)``) that any number of
``VM(flags | FLAG_FULL_MEM, dataset=...)`` share, one per thread. Every hash releases the GIL.

One-call helpers: :func:`hash` (key, data, v2) and the pyrx-style :func:`get_rx_hash`, which
keep the caches of the two most recent keys (512 MiB) and make a VM per call (a 2 MiB
scratchpad and JIT buffer): for a stream of hashes, such as a pool verifying shares, keep a
:class:`VM` per thread instead.

:class:`LightBatch` (``LightBatch(flags, cache, vms=4).hash_many(inputs)``) hashes a list of
inputs in light mode with several VMs on one thread, their dataset items computed together in
vector lanes: about twice the throughput of one VM, for verifying many blocks of one key.
"""

from __future__ import annotations

from typing import Callable, Optional

from ._proofkit import randomx as _native

Cache = _native.Cache
Dataset = _native.Dataset
VM = _native.VM
LightBatch = _native.LightBatch
get_flags = _native.get_flags
dataset_item_count = _native.dataset_item_count
commitment = _native.commitment
hash = _native.hash  # noqa: A001 (the issue's name for the one-call helper)

FLAG_DEFAULT: int = _native.FLAG_DEFAULT
FLAG_LARGE_PAGES: int = _native.FLAG_LARGE_PAGES
FLAG_HARD_AES: int = _native.FLAG_HARD_AES
FLAG_FULL_MEM: int = _native.FLAG_FULL_MEM
FLAG_JIT: int = _native.FLAG_JIT
FLAG_SECURE: int = _native.FLAG_SECURE
FLAG_ARGON2_SSSE3: int = _native.FLAG_ARGON2_SSSE3
FLAG_ARGON2_AVX2: int = _native.FLAG_ARGON2_AVX2
FLAG_ARGON2: int = _native.FLAG_ARGON2
FLAG_V2: int = _native.FLAG_V2

# cyrx's names for the same values.
CYRX_FLAG_DEFAULT = FLAG_DEFAULT
CYRX_FLAG_LARGE_PAGES = FLAG_LARGE_PAGES
CYRX_FLAG_HARD_AES = FLAG_HARD_AES
CYRX_FLAG_FULL_MEM = FLAG_FULL_MEM
CYRX_FLAG_JIT = FLAG_JIT
CYRX_FLAG_SECURE = FLAG_SECURE
CYRX_FLAG_ARGON2_SSSE3 = FLAG_ARGON2_SSSE3
CYRX_FLAG_ARGON2_AVX2 = FLAG_ARGON2_AVX2
CYRX_FLAG_ARGON2 = FLAG_ARGON2
CYRX_FLAG_V2 = FLAG_V2

#: Monero's seed epoch: the key changes every 2048 blocks ...
SEEDHASH_EPOCH_BLOCKS = 2048
#: ... 64 blocks after the epoch's first block.
SEEDHASH_EPOCH_LAG = 64


def _check_height(height: int) -> int:
    if isinstance(height, bool) or not isinstance(height, int):
        raise TypeError(f"height must be an int, not {type(height).__name__}")
    if height < 0:
        raise ValueError(f"height must be >= 0, got {height}")
    return height


def seed_height(height: int) -> int:
    """The height of the block whose hash keys RandomX for block ``height`` (Monero's
    ``rx_seedheight``): ``(height - 64 - 1) & ~2047``, and 0 up to height 2112."""
    _check_height(height)
    if height <= SEEDHASH_EPOCH_BLOCKS + SEEDHASH_EPOCH_LAG:
        return 0
    return (height - SEEDHASH_EPOCH_LAG - 1) & ~(SEEDHASH_EPOCH_BLOCKS - 1)


def next_seed_height(height: int) -> int:
    """The seed height in force 64 blocks after ``height`` (Monero's ``rx_seedheights``
    second value): the key a miner prepares its next cache for."""
    return seed_height(_check_height(height) + SEEDHASH_EPOCH_LAG)


def get_rx_hash(
    data: bytes,
    seed_hash: Optional[bytes],
    height: int,
    *,
    block_hash: Optional[Callable[[int], bytes]] = None,
) -> bytes:
    """pyrx's ``get_rx_hash(input, seed_hash, height)``: the RandomX v1 hash of ``data`` for a
    block at ``height``.

    With a ``seed_hash`` (what monerod's block template gives), that hash is the key and
    ``height`` is only checked. With ``seed_hash=None``, Monero's seed-height rule picks the
    key: ``block_hash(seed_height(height))``, where ``block_hash`` looks up a block hash by
    height (from a node or an explorer's database).
    """
    _check_height(height)
    if seed_hash is None:
        if block_hash is None:
            raise ValueError("get_rx_hash needs a seed_hash or a block_hash lookup")
        seed_hash = block_hash(seed_height(height))
    return _native.hash(seed_hash, data, False)


# Benchmark helpers (python/bench/light_overhead.py).
_rust_hash_loop = _native._rust_hash_loop
_hash_timed = _native._hash_timed

__all__ = [
    "Cache",
    "Dataset",
    "VM",
    "LightBatch",
    "get_flags",
    "dataset_item_count",
    "commitment",
    "hash",
    "get_rx_hash",
    "seed_height",
    "next_seed_height",
    "SEEDHASH_EPOCH_BLOCKS",
    "SEEDHASH_EPOCH_LAG",
] + [n for n in dir() if n.startswith(("FLAG_", "CYRX_FLAG_"))]
