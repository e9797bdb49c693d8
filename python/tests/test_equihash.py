"""proofkit.equihash: the shared vectors (listed solutions, solver output, the regtest block,
the invalid mutations with their kinds, minimal encodings), solutions of random headers checked
by the verifier and mutated into typed rejections, and bad input."""

from __future__ import annotations

import random

import pytest

from proofkit import EquihashError, equihash


def mutate(desc: str, s: list) -> list:
    """The mutations named in equihash.json's "invalid" cases."""
    m = list(s)
    n = len(m)
    if desc.startswith("index 0 changed from"):
        m[0] = int(desc.rsplit(" ", 1)[1])
    elif desc == "swap positions 0 and 12":
        m[0], m[12] = m[12], m[0]
    elif desc == "reverse the first pair":
        m[0], m[1] = m[1], m[0]
    elif desc == "swap pair 0 and pair 1":
        m[0:2], m[2:4] = m[2:4], m[0:2]
    elif desc == "swap the last two pairs":
        m[n - 4 : n - 2], m[n - 2 :] = m[n - 2 :], m[n - 4 : n - 2]
    elif desc == "swap the two halves (16 and 16)":
        m = m[n // 2 :] + m[: n // 2]
    elif desc == "sort all 32 indices ascending":
        m.sort()
    elif desc == "each of the first 16 indices doubled in place (a,a,b,b,...)":
        m = [x for x in s[: n // 2] for _ in (0, 1)]
    elif desc == "first half repeated twice":
        m = s[: n // 2] * 2
    else:
        raise AssertionError(f"unknown mutation in vectors: {desc}")
    return m


def cases(vectors: dict, n: int):
    return [c for c in vectors["solve"] if c["n"] == n]


def test_listed_solutions_verify_and_encode(eq_vectors):
    for c in eq_vectors["solve"]:
        n, k, header, nonce = c["n"], c["k"], c["input"].encode(), c["nonce_int"]
        for s in c["solutions"]:
            equihash.verify(n, k, header, nonce, s)
            enc = equihash.encode_minimal(n, k, s)
            assert equihash.decode_minimal(n, k, enc) == s
            equihash.verify(n, k, header, nonce, enc)
            assert equihash.is_valid(n, k, header, nonce, enc)
        if "minimal_hex_of_first" in c:
            assert equihash.encode_minimal(n, k, c["solutions"][0]).hex() == c["minimal_hex_of_first"]


@pytest.mark.parametrize(
    "mode,height,threads",
    [("full", None, 1), ("full", None, 2), ("pr", 1, 2), ("pr", 3, 1), ("em", None, 2)],
)
def test_solver_finds_exactly_the_listed_solutions(eq_vectors, mode, height, threads):
    for c in cases(eq_vectors, 96):
        got = equihash.solve(
            c["n"], c["k"], c["input"].encode(), c["nonce_int"], mode=mode, height=height, threads=threads
        )
        assert sorted(got) == sorted(c["solutions"]), c["input"]


def test_regtest_block(eq_vectors):
    for c in eq_vectors["verify_block"]:
        n, k = c["n"], c["k"]
        header, nonce = bytes.fromhex(c["header_hex"]), bytes.fromhex(c["nonce_hex"])
        sol = bytes.fromhex(c["solution_minimal_hex"])
        assert equihash.is_valid(n, k, header, nonce, sol) == c["valid"]
        assert equihash.decode_minimal(n, k, sol) in equihash.solve(n, k, header, nonce)
        for bad in (sol[1:], sol + b"\0"):
            with pytest.raises(EquihashError) as e:
                equihash.verify(n, k, header, nonce, bad)
            assert e.value.kind == "BadLength"


def test_invalid_mutations_have_their_kinds(eq_vectors):
    base = eq_vectors["solve"][1]
    n, k, header, nonce = base["n"], base["k"], base["input"].encode(), base["nonce_int"]
    first = base["solutions"][0]
    assert eq_vectors["invalid"]["cases"]
    for case in eq_vectors["invalid"]["cases"]:
        m = mutate(case["mutation"], first)
        for form in (m, equihash.encode_minimal(n, k, m)):
            with pytest.raises(EquihashError) as e:
                equihash.verify(n, k, header, nonce, form)
            assert e.value.kind == case["expect"], case["mutation"]
            if e.value.kind != "NonZeroRoot":
                assert isinstance(e.value.level, int) and isinstance(e.value.position, int)
    with pytest.raises(EquihashError) as e:
        equihash.verify(n, k, header, nonce, first[1:])
    assert e.value.kind == "BadLength"
    big = list(first)
    big[5] = 1 << equihash.params_info(n, k)["index_bits"]
    with pytest.raises(EquihashError) as e:
        equihash.verify(n, k, header, nonce, big)
    assert e.value.kind == "IndexOutOfRange"


def test_minimal_encodings_of_21_bit_indices(eq_vectors):
    for c in eq_vectors["minimal_encoding_21bit"]:
        assert equihash.encode_minimal(80, 3, c["indices"]).hex() == c["hex"]
        assert equihash.decode_minimal(80, 3, bytes.fromhex(c["hex"])) == c["indices"]


def test_random_headers_solutions_verify_and_mutations_are_typed():
    """(96,5) on random 140-byte headers and nonces: every solution verifies; a swapped pair is
    OutOfOrder, a changed index does not verify, a flipped nonce rejects it."""
    rng = random.Random(96)
    found = 0
    for _ in range(6):
        header = rng.randbytes(140)
        nonce = rng.randbytes(32)
        sols = equihash.solve(96, 5, header, nonce, threads=2)
        for s in sols:
            found += 1
            equihash.verify(96, 5, header, nonce, s)
            enc = equihash.encode_minimal(96, 5, s)
            equihash.verify(96, 5, header, nonce, enc)
            swapped = [s[1], s[0]] + s[2:]
            with pytest.raises(EquihashError) as e:
                equihash.verify(96, 5, header, nonce, swapped)
            assert e.value.kind == "OutOfOrder"
            changed = [s[0] ^ 1] + s[1:]
            with pytest.raises(EquihashError):
                equihash.verify(96, 5, header, nonce, changed)
            other = bytes([nonce[0] ^ 1]) + nonce[1:]
            assert not equihash.is_valid(96, 5, header, other, enc)
    assert found > 0, "no solutions in 6 random instances (about 2 expected each)"


def test_personalization():
    """Another coin's personalization gives other solutions, each valid only under it."""
    header, nonce = b"personalized header", 7
    sols = equihash.solve(96, 5, header, nonce, personalization=b"BgoldPoW")
    zec = equihash.solve(96, 5, header, nonce)
    for s in sols:
        equihash.verify(96, 5, header, nonce, s, personalization=b"BgoldPoW")
        if s not in zec:
            assert not equihash.is_valid(96, 5, header, nonce, s)


def test_bad_input():
    with pytest.raises(ValueError):
        equihash.solve(95, 5, b"h", 0)  # n not a multiple of 8
    with pytest.raises(ValueError):
        equihash.verify(96, 4, b"h", 0, b"")  # n not a multiple of k + 1
    with pytest.raises(ValueError):
        equihash.solve(96, 5, b"h", 0, personalization=b"TooLongPers")
    with pytest.raises(ValueError):
        equihash.solve(96, 5, b"h", 0, mode="fast")
    with pytest.raises(ValueError):
        equihash.solve(96, 5, b"h", 0, mode="full", height=2)
    with pytest.raises(ValueError):
        equihash.solve(96, 5, b"h", 0, threads=0)
    with pytest.raises(EquihashError) as e:
        equihash.solve(96, 5, b"h", 0, mode="pr", height=5)
    assert e.value.kind == "BadHeight"
    with pytest.raises(TypeError):
        equihash.solve(96, 5, "text header", 0)
    with pytest.raises(TypeError):
        equihash.verify(96, 5, b"h", 0, "not a solution")
    with pytest.raises(ValueError):
        equihash.solve(96, 5, b"h", -1)
    with pytest.raises(EquihashError) as e:
        equihash.verify(96, 5, b"h", 0, [-1] * 32)
    assert e.value.kind == "IndexOutOfRange"
    with pytest.raises(EquihashError) as e:
        equihash.encode_minimal(96, 5, [1] * 31)
    assert e.value.kind == "BadCount"
    with pytest.raises(EquihashError) as e:
        equihash.decode_minimal(96, 5, b"\0" * 3)
    assert e.value.kind == "BadLength"
