"""Type stubs of proofkit.randomx (see the module docstring in randomx.py)."""

from typing import Callable, Optional, Union

Buffer = Union[bytes, bytearray, memoryview]
Progress = Callable[[int, int], object]

FLAG_DEFAULT: int
FLAG_LARGE_PAGES: int
FLAG_HARD_AES: int
FLAG_FULL_MEM: int
FLAG_JIT: int
FLAG_SECURE: int
FLAG_ARGON2_SSSE3: int
FLAG_ARGON2_AVX2: int
FLAG_ARGON2: int
FLAG_V2: int
CYRX_FLAG_DEFAULT: int
CYRX_FLAG_LARGE_PAGES: int
CYRX_FLAG_HARD_AES: int
CYRX_FLAG_FULL_MEM: int
CYRX_FLAG_JIT: int
CYRX_FLAG_SECURE: int
CYRX_FLAG_ARGON2_SSSE3: int
CYRX_FLAG_ARGON2_AVX2: int
CYRX_FLAG_ARGON2: int
CYRX_FLAG_V2: int
SEEDHASH_EPOCH_BLOCKS: int
SEEDHASH_EPOCH_LAG: int

def get_flags() -> int:
    """The recommended flags for this machine (HARD_AES, JIT and the Argon2 bits where the CPU
    has them), as ``randomx_get_flags``."""

def dataset_item_count() -> int:
    """Items (64 bytes each) in the fast-mode dataset."""

def commitment(input: Buffer, hash: Buffer) -> bytes:
    """RandomX v2's commitment ``Blake2b-256(input || hash)``; ``hash`` must be 32 bytes."""

def hash(key: Buffer, data: Buffer, v2: bool = False) -> bytes:
    """One-call light-mode hash of ``data`` under ``key`` (caches of the last two keys kept)."""

def get_rx_hash(
    data: Buffer,
    seed_hash: Optional[Buffer],
    height: int,
    *,
    block_hash: Optional[Callable[[int], bytes]] = None,
) -> bytes:
    """pyrx's helper: v1 hash of ``data`` keyed by ``seed_hash``, or with ``seed_hash=None`` by
    ``block_hash(seed_height(height))``."""

def seed_height(height: int) -> int:
    """Monero's seed height for a block at ``height``: ``(h - 65) & ~2047``, 0 up to 2112."""

def next_seed_height(height: int) -> int:
    """The seed height in force 64 blocks after ``height``."""

class Cache:
    """The 256 MiB Argon2 cache of a key. ``Cache(flags)`` allocates nothing; ``init`` builds."""

    def __init__(self, flags: int = 0) -> None: ...
    def init(self, key: Buffer) -> None:
        """Builds the cache for ``key`` (GIL released). Re-keys in place when no VM or dataset
        holds it; otherwise they keep the old key until ``VM.set_cache``."""
    @property
    def key(self) -> Optional[bytes]: ...
    @property
    def flags(self) -> int: ...

class Dataset:
    """The 2080 MiB fast-mode dataset, shared read-only by any number of VMs."""

    def __init__(
        self,
        flags: int = 0,
        cache: Optional[Cache] = None,
        threads: Optional[int] = None,
        progress: Optional[Progress] = None,
    ) -> None:
        """Allocates; with ``cache``, builds it at once (see ``init``)."""
    def init(
        self,
        cache: Cache,
        start_item: int = 0,
        item_count: Optional[int] = None,
        threads: Optional[int] = None,
        progress: Optional[Progress] = None,
    ) -> None:
        """Computes items ``start_item .. start_item + item_count`` (default: all). A full
        build runs on ``threads`` threads (default: all cores) and calls
        ``progress(done_items, total_items)`` as chunks finish; an exception raised by
        ``progress`` is re-raised when the build ends. Raises ``RandomxError(kind="InUse")``
        while a VM holds the dataset."""
    @property
    def flags(self) -> int: ...

class VM:
    """A RandomX virtual machine: light mode on a ``cache``, fast mode (``FLAG_FULL_MEM``) on a
    ``dataset``; ``FLAG_V2`` selects RandomX v2. One VM per thread; hashing releases the GIL."""

    def __init__(
        self, flags: int = 0, cache: Optional[Cache] = None, dataset: Optional[Dataset] = None
    ) -> None: ...
    def set_cache(self, cache: Cache) -> None:
        """Points a light-mode VM at ``cache`` (after ``cache.init`` with a new key)."""
    def set_dataset(self, dataset: Dataset) -> None:
        """Points a fast-mode VM at ``dataset``."""
    def hash(self, input: Buffer) -> bytes:
        """The 32-byte RandomX hash of ``input``."""
    def hash_first(self, input: Buffer) -> None:
        """Batch API: starts hashing ``input``."""
    def hash_next(self, input: Buffer) -> bytes:
        """Batch API: the pending hash; starts hashing ``input``. ``RandomxError`` without a
        pending ``hash_first``."""
    def hash_last(self) -> bytes:
        """Batch API: the pending hash."""
    @property
    def flags(self) -> int: ...
    @property
    def v2(self) -> bool: ...
    @property
    def fast(self) -> bool: ...
    @property
    def uses_jit(self) -> bool: ...

class LightBatch:
    """Light-mode VMs (``vms`` of them) hashing a list of inputs together on the calling thread:
    their dataset items are computed together in vector lanes, about twice one VM's
    throughput; each hash takes as long as one VM's or longer. Not with ``FLAG_FULL_MEM``."""

    def __init__(self, flags: int, cache: Cache, vms: int = 4) -> None: ...
    def hash_many(self, inputs: list[Buffer]) -> list[bytes]:
        """The 32-byte RandomX hash of every input, in order (releases the GIL)."""
    @property
    def vms(self) -> int: ...
    @property
    def flags(self) -> int: ...

def _rust_hash_loop(vm: VM, data: Buffer, count: int) -> list[tuple[int, int]]: ...
def _hash_timed(vm: VM, input: Buffer) -> tuple[bytes, int, int]: ...
