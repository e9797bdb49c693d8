"""proofkit.vdf: the chain vectors, prove/verify round trips (with infusions and progress),
tampered, truncated and corrupt proofs raising typed errors, and bad input."""

from __future__ import annotations

import hashlib
import random

import pytest

from proofkit import VdfError, vdf


def sha_chain(h: bytes, n: int) -> bytes:
    """The oracle: hashlib, one link at a time."""
    for _ in range(n):
        h = hashlib.sha256(h).digest()
    return h


def test_chain_vectors(vdf_vectors):
    for c in vdf_vectors["chains"]:
        assert vdf.chain(bytes.fromhex(c["start_hex"]), c["iterations"]).hex() == c["end_hex"]


def test_chain_matches_hashlib():
    rng = random.Random(5)
    for n in (0, 1, 2, 17, 1000):
        start = rng.randbytes(32)
        assert vdf.chain(start, n) == sha_chain(start, n)


def test_prove_verify_round_trip():
    start = bytes(range(32))
    seen = []
    proof = vdf.prove(start, 10_000, 1_000, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (10_000, 10_000)
    out = vdf.verify(proof)
    assert out == sha_chain(start, 10_000)
    info = vdf.proof_info(proof)
    assert info["iterations"] == 10_000 and info["segment"] == 1_000
    assert len(info["checkpoints"]) == 10 and info["output"] == out
    assert info["checkpoints"][3] == sha_chain(start, 4_000)
    assert vdf.verify(proof, threads=1) == out


def test_infusions_and_short_last_segment():
    start, v1, v2 = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32
    proof = vdf.prove(start, 2_500, 1_000, infusions=[v1, v2])
    seed = hashlib.sha256(hashlib.sha256(start + v1).digest() + v2).digest()
    assert vdf.proof_info(proof)["seed"] == seed
    assert vdf.verify(proof) == sha_chain(seed, 2_500)


def _resealed(proof: bytes, at: int, new: bytes) -> bytes:
    """`proof` with bytes at `at` replaced and the trailing SHA-256 recomputed, so that only the
    chain check can catch the change."""
    body = proof[:-32]
    body = body[:at] + new + body[at + len(new) :]
    return body + hashlib.sha256(body).digest()


def test_tampered_checkpoint_names_the_segment():
    proof = vdf.prove(b"\x07" * 32, 8_000, 1_000)
    k = 8
    first_cp = len(proof) - 32 - 32 * k
    for i in (0, 3, 7):
        at = first_cp + 32 * i
        bad = _resealed(proof, at, bytes([proof[at] ^ 1]))
        with pytest.raises(VdfError) as e:
            vdf.verify(bad)
        assert e.value.kind == "BadSegment"
        assert e.value.segment == i and e.value.segments == k


def test_corrupt_proofs_are_typed():
    proof = vdf.prove(b"\x09" * 32, 3_000, 1_000)
    flipped = proof[:50] + bytes([proof[50] ^ 0x80]) + proof[51:]
    for bad, kind in [
        (flipped, "Checksum"),
        (proof[:-1], "Truncated"),
        (proof + b"\0", "TrailingBytes"),
        (proof[:10], "TooShort"),
        (b"NOTAPROO" + proof[8:], "BadMagic"),
    ]:
        with pytest.raises(VdfError) as e:
            vdf.verify(bad)
        assert e.value.kind == kind
        with pytest.raises(VdfError):
            vdf.proof_info(bad)


def test_bad_input():
    with pytest.raises(ValueError):
        vdf.chain(b"short", 1)
    with pytest.raises(TypeError):
        vdf.chain("x" * 32, 1)
    with pytest.raises(VdfError) as e:
        vdf.prove(b"\0" * 32, 0, 10)
    assert e.value.kind == "ZeroIterations"
    with pytest.raises(VdfError) as e:
        vdf.prove(b"\0" * 32, 10, 0)
    assert e.value.kind == "ZeroSegment"
    with pytest.raises(ValueError):
        vdf.prove(b"\0" * 32, 10, 5, infusions=[b"\0" * 31])
    with pytest.raises(OverflowError):
        vdf.chain(b"\0" * 32, -1)

    def boom(done: int, total: int) -> None:
        raise RuntimeError("progress failed")

    with pytest.raises(RuntimeError):
        vdf.prove(b"\0" * 32, 100, 10, progress=boom)
