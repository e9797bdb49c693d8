"""proofkit.randomx: the shared vectors, cyrx as the oracle on random inputs (v1 and v2), the
batch API, the one-call helpers, Monero's seed-height rule, threads, fast mode, bad input."""

from __future__ import annotations

import os
import random
import threading

import pytest

from conftest import field_bytes
from proofkit import RandomxError, randomx
from proofkit.randomx import FLAG_FULL_MEM, FLAG_V2, VM, Cache, Dataset, LightBatch, get_flags

FLAGS = get_flags()


def vm_for(cache: Cache, v2: bool, flags: int = FLAGS) -> VM:
    return VM(flags | (FLAG_V2 if v2 else 0), cache=cache)


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_vector_hashes(rx_vectors, rx_cache, v2):
    for v in rx_vectors["hashes"]:
        vm = vm_for(rx_cache(field_bytes(v, "key")), v2)
        want = v["v2" if v2 else "v1"]
        assert vm.hash(field_bytes(v, "input")).hex() == want
        # Any bytes-like input gives the same hash.
        assert vm.hash(bytearray(field_bytes(v, "input"))).hex() == want
        assert vm.hash(memoryview(field_bytes(v, "input"))).hex() == want


def test_vector_hashes_portable_flags(rx_vectors, rx_cache):
    """flags=0: interpreter and software AES, as randomx.h's default flags mean."""
    v = rx_vectors["hashes"][0]
    vm = VM(0, cache=rx_cache(field_bytes(v, "key")))
    assert not vm.uses_jit
    assert vm.hash(field_bytes(v, "input")).hex() == v["v1"]
    vm2 = VM(FLAG_V2, cache=rx_cache(field_bytes(v, "key")))
    assert vm2.hash(field_bytes(v, "input")).hex() == v["v2"]


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_vector_commitments(rx_vectors, rx_cache, v2):
    for v in rx_vectors["commitments"]:
        vm = vm_for(rx_cache(field_bytes(v, "key")), v2)
        data = field_bytes(v, "input")
        assert randomx.commitment(data, vm.hash(data)).hex() == v["v2" if v2 else "v1"]


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_batch_rule(rx_vectors, rx_cache, v2):
    """hash_first(a); hash_next(b) -> hash(a); hash_next(c) -> hash(b); hash_last -> hash(c)."""
    key = field_bytes(rx_vectors["hashes"][0], "key")
    vm = vm_for(rx_cache(key), v2)
    inputs = [field_bytes(v, "input") for v in rx_vectors["hashes"] if field_bytes(v, "key") == key]
    want = [vm.hash(x) for x in inputs]
    vm.hash_first(inputs[0])
    got = [vm.hash_next(x) for x in inputs[1:]] + [vm.hash_last()]
    assert got == want


def test_one_call_helper(rx_vectors):
    for v in rx_vectors["hashes"]:
        key, data = field_bytes(v, "key"), field_bytes(v, "input")
        assert randomx.hash(key, data).hex() == v["v1"]
        assert randomx.hash(key, data, v2=True).hex() == v["v2"]


cyrx = pytest.importorskip("cyrx", reason="skipped: cyrx (the oracle) is not installed")


@pytest.fixture(scope="module")
def cyrx_pair():
    """A random key, and the cyrx and proofkit caches of it."""
    rng = random.Random(0x5EED)
    key = rng.randbytes(rng.randrange(1, 61))
    oracle = cyrx.Cache(cyrx.get_flags())
    oracle.init(key)
    mine = Cache(FLAGS)
    mine.init(key)
    return key, oracle, mine


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_cyrx_hash_random_inputs(cyrx_pair, v2):
    _, oracle, mine = cyrx_pair
    extra = cyrx.CYRX_FLAG_V2 if v2 else 0
    theirs = cyrx.VM(cyrx.get_flags() | extra, cache=oracle)
    ours = VM(FLAGS | (FLAG_V2 if v2 else 0), cache=mine)
    rng = random.Random(1 + v2)
    for _ in range(12):
        # cyrx refuses empty input, so lengths start at 1.
        data = rng.randbytes(rng.choice([1, 43, 76, rng.randrange(1, 200)]))
        assert ours.hash(data) == theirs.hash(data), data.hex()


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_cyrx_batch_random_inputs(cyrx_pair, v2):
    _, oracle, mine = cyrx_pair
    theirs = cyrx.VM(cyrx.get_flags() | (cyrx.CYRX_FLAG_V2 if v2 else 0), cache=oracle)
    ours = VM(FLAGS | (FLAG_V2 if v2 else 0), cache=mine)
    rng = random.Random(10 + v2)
    inputs = [rng.randbytes(rng.randrange(1, 100)) for _ in range(5)]
    theirs.hash_first(inputs[0])
    ours.hash_first(inputs[0])
    for x in inputs[1:]:
        assert ours.hash_next(x) == theirs.hash_next(x)
    assert ours.hash_last() == theirs.hash_last()


def test_cyrx_flag_values_and_names():
    """A cyrx user switches by changing the import: same names, same values."""
    for name in dir(cyrx):
        if name.startswith("CYRX_FLAG_"):
            assert getattr(randomx, name) == getattr(cyrx, name), name
    assert randomx.dataset_item_count() == cyrx.dataset_item_count()
    assert randomx.get_flags() & ~randomx.FLAG_ARGON2 == cyrx.get_flags() & ~cyrx.CYRX_FLAG_ARGON2


def test_cyrx_rekeyed_cache(cyrx_pair):
    """Cache.init with a new key, then VM.set_cache, as cyrx users re-key."""
    rng = random.Random(3)
    key2 = rng.randbytes(32)
    oracle = cyrx.Cache(cyrx.get_flags())
    oracle.init(key2)
    mine = Cache(FLAGS)
    mine.init(b"some other key")
    vm = VM(FLAGS, cache=mine)
    mine.init(key2)  # the VM still holds the old key until set_cache
    vm.set_cache(mine)
    data = rng.randbytes(40)
    assert vm.hash(data) == cyrx.VM(cyrx.get_flags(), cache=oracle).hash(data)
    assert mine.key == key2


def test_seed_height_rule():
    sh = randomx.seed_height
    assert [sh(h) for h in (0, 1, 2048, 2112)] == [0, 0, 0, 0]
    assert sh(2113) == 2048
    assert sh(2048 + 64 + 2048) == 2048
    assert sh(2048 + 64 + 2049) == 4096
    assert randomx.next_seed_height(2049) == 2048
    rng = random.Random(7)
    for h in [rng.randrange(10**7) for _ in range(200)]:
        want = 0 if h <= 2112 else (h - 65) & ~2047
        assert sh(h) == want
    with pytest.raises(ValueError):
        sh(-1)
    with pytest.raises(TypeError):
        sh("5")


def test_seed_height_matches_cyrx():
    s = cyrx.SeedHeight()
    rng = random.Random(8)
    for h in [0, 2112, 2113, 4160, 4161] + [rng.randrange(10**7) for _ in range(100)]:
        assert randomx.seed_height(h) == s.get_current(h), h


def test_get_rx_hash(rx_vectors):
    v = rx_vectors["hashes"][0]
    key, data = field_bytes(v, "key"), field_bytes(v, "input")
    assert randomx.get_rx_hash(data, key, 3_000_000).hex() == v["v1"]
    asked = []

    def block_hash(height: int) -> bytes:
        asked.append(height)
        return key

    assert randomx.get_rx_hash(data, None, 5000, block_hash=block_hash).hex() == v["v1"]
    assert asked == [4096]
    with pytest.raises(ValueError):
        randomx.get_rx_hash(data, None, 5000)
    with pytest.raises(ValueError):
        randomx.get_rx_hash(data, key, -5)


def test_threads_share_a_cache(rx_cache, rx_vectors):
    """Several threads, one VM each, on one cache: the GIL is released, results are right."""
    v = rx_vectors["hashes"][0]
    cache = rx_cache(field_bytes(v, "key"))
    results: dict = {}

    def work(i: int) -> None:
        vm = VM(FLAGS, cache=cache)
        results[i] = [vm.hash(field_bytes(v, "input")) for _ in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == [bytes.fromhex(v["v1"])] * 3 for r in results.values())


def test_bad_input(rx_cache, rx_vectors):
    cache = rx_cache(field_bytes(rx_vectors["hashes"][0], "key"))
    vm = VM(FLAGS, cache=cache)
    for bad in ("text", 5, None, [1, 2]):
        with pytest.raises(TypeError):
            vm.hash(bad)
    with pytest.raises(RandomxError) as e:
        VM(FLAGS).hash_next(b"x")
    assert e.value.kind == "CacheNotInitialized"
    with pytest.raises(RandomxError) as e:
        vm.hash_next(b"x")
    assert e.value.kind == "NoPendingHash"
    with pytest.raises(RandomxError) as e:
        vm.hash_last()
    assert e.value.kind == "NoPendingHash"
    with pytest.raises(RandomxError) as e:
        VM(FLAGS, cache=Cache(FLAGS))  # never initialised
    assert e.value.kind == "CacheNotInitialized"
    with pytest.raises(RandomxError) as e:
        VM(FLAGS | FLAG_FULL_MEM, cache=cache)
    assert e.value.kind == "NoDataset"
    with pytest.raises(ValueError):
        Cache(1 << 12)
    with pytest.raises(ValueError):
        randomx.commitment(b"input", b"\0" * 31)
    with pytest.raises(TypeError):
        randomx.hash("key", b"data")
    # A dataset range past the end is refused, not written.
    d = Dataset(FLAGS)
    with pytest.raises(RandomxError) as e:
        d.init(cache, randomx.dataset_item_count() - 1, 2)
    assert e.value.kind == "ItemRange"


def test_progress_callback_errors_propagate(rx_cache, rx_vectors):
    cache = rx_cache(field_bytes(rx_vectors["hashes"][0], "key"))
    d = Dataset(FLAGS)
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append((done, total))
        raise KeyError("stop")

    with pytest.raises(KeyError):
        d.init(cache, 0, 1000, progress=progress)
    assert calls == [(1000, 1000)]


@pytest.mark.skipif(
    os.environ.get("PROOFKIT_PY_SKIP_FAST") == "1", reason="skipped: PROOFKIT_PY_SKIP_FAST=1"
)
def test_fast_mode_shared_dataset(rx_vectors, rx_cache):
    """The 2080 MiB dataset, built on 2 threads with a progress callback, shared by two VMs in
    two threads (v1 and v2), against the vectors."""
    v = rx_vectors["hashes"][0]
    cache = rx_cache(field_bytes(v, "key"))
    seen = []
    d = Dataset(FLAGS, cache, threads=2, progress=lambda done, total: seen.append((done, total)))
    total = randomx.dataset_item_count()
    assert seen and seen[-1][1] == total and max(s[0] for s in seen) == total
    out: dict = {}

    def work(v2: bool) -> None:
        vm = VM(FLAGS | FLAG_FULL_MEM | (FLAG_V2 if v2 else 0), dataset=d)
        assert vm.fast
        out[v2] = vm.hash(field_bytes(v, "input")).hex()

    threads = [threading.Thread(target=work, args=(b,)) for b in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {False: v["v1"], True: v["v2"]}
    # In use by no VM now (the VMs are gone): a partial re-init is allowed; while a VM holds
    # it, it is refused.
    vm = VM(FLAGS | FLAG_FULL_MEM, dataset=d)
    with pytest.raises(RandomxError) as e:
        d.init(cache, 0, 10)
    assert e.value.kind == "InUse"
    del vm


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_light_batch_equals_vm(rx_vectors, rx_cache, v2):
    """LightBatch against one VM on random inputs (more and fewer than its VMs) and the vectors."""
    v = rx_vectors["hashes"][0]
    cache = rx_cache(field_bytes(v, "key"))
    flags = FLAGS | (FLAG_V2 if v2 else 0)
    rng = random.Random(5)
    inputs = [rng.randbytes(rng.choice([0, 43, 76, 150])) for _ in range(6)]
    vm = VM(flags, cache=cache)
    want = [vm.hash(i) for i in inputs]
    batch = LightBatch(flags, cache, vms=4)
    assert batch.vms == 4 and batch.flags == flags
    assert batch.hash_many(inputs) == want
    assert batch.hash_many([bytearray(inputs[0]), memoryview(inputs[1])]) == want[:2]
    assert batch.hash_many([]) == []
    cases = [h for h in rx_vectors["hashes"] if field_bytes(h, "key") == field_bytes(v, "key")]
    got = LightBatch(flags, cache).hash_many([field_bytes(h, "input") for h in cases])
    assert [g.hex() for g in got] == [h["v2" if v2 else "v1"] for h in cases]


def test_light_batch_bad_input(rx_vectors, rx_cache):
    cache = rx_cache(field_bytes(rx_vectors["hashes"][0], "key"))
    with pytest.raises(RandomxError):
        LightBatch(FLAGS, cache, vms=0)
    with pytest.raises(ValueError):
        LightBatch(FLAGS | FLAG_FULL_MEM, cache)
    with pytest.raises(ValueError):
        LightBatch(1 << 12, cache)
    batch = LightBatch(FLAGS, cache, vms=2)
    with pytest.raises(TypeError):
        batch.hash_many(["text, not bytes"])
    with pytest.raises(TypeError):
        batch.hash_many(b"not a list of inputs")
