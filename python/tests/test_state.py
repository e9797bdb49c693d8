"""proofkit.state: a round trip through a database on disk (begin, set, commit, finalize,
close, reopen, read, proofs), forks, context managers, typed errors and bad input."""

from __future__ import annotations

import random

import pytest

from proofkit import StateError, state
from proofkit.state import Account, Db, verify_proof

A = bytes.fromhex("00000000000000000000000000000000000000aa")
B = bytes.fromhex("00000000000000000000000000000000000000bb")


def test_empty_root():
    with Db() as db:
        # keccak256(rlp(b"")): the root of an empty trie.
        assert db.root() == state.EMPTY_ROOT
        assert state.EMPTY_ROOT.hex() == "56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421"
        assert db.root().hex() == state.EMPTY_ROOT.hex()


def test_round_trip_on_disk(tmp_path):
    rng = random.Random(11)
    accounts = {rng.randbytes(20): (rng.randrange(100), rng.randrange(2**256)) for _ in range(50)}
    slots = {a: {rng.randrange(2**256): rng.randrange(1, 2**256) for _ in range(3)} for a in list(accounts)[:10]}
    with Db(tmp_path / "db") as db:
        assert db.finalized == 0 and db.number() == 0
        with db.begin() as block:
            for a, (nonce, bal) in accounts.items():
                block.set_account(a, nonce=nonce, balance=bal)
            for a, kv in slots.items():
                for k, v in kv.items():
                    block.set_storage(a, k, v)
            # Read-your-writes inside the block.
            a0 = next(iter(accounts))
            assert block.get_account(a0) == Account(accounts[a0][0], accounts[a0][1])
            open_root = block.root
        assert block.id is not None and block.number == 1
        root = db.root(block.id)
        assert root == open_root == block.root
        assert db.finalize(block.id)["new_pages"] > 0
        assert db.finalized == block.id and db.root() == root
        for a, (nonce, bal) in accounts.items():
            acc = db.get_account(a)
            assert acc is not None and (acc.nonce, acc.balance) == (nonce, bal)
            assert acc.code_hash == state.KECCAK_EMPTY
    assert db.closed
    with pytest.raises(StateError) as e:
        db.root()
    assert e.value.kind == "Closed"

    with Db(str(tmp_path / "db")) as again:
        assert again.root() == root and again.number() == 1
        assert again.check() == root
        for a, kv in slots.items():
            for k, v in kv.items():
                assert again.get_storage(a, k) == v
                assert again.get_storage(a, k.to_bytes(32, "big")) == v
        a = next(iter(slots))
        keys = list(slots[a])
        proof = again.get_proof(a, keys + [12345])
        verify_proof(root, proof)
        assert [s["value"] for s in proof["storage_proof"]] == [slots[a][k] for k in keys] + [0]
        # An absent account has a proof of absence.
        verify_proof(root, again.get_proof(b"\x01" * 20))


def test_proof_tampering_is_typed():
    with Db() as db:
        with db.begin() as b:
            b.set_account(A, nonce=1, balance=10**18)
            b.set_account(B, nonce=2, balance=5)
            b.set_storage(A, 1, 99)
        root = db.root(b.id)
        proof = db.get_proof(A, [1], block=b.id)
        verify_proof(root, proof)
        lie = dict(proof, balance=proof["balance"] + 1)
        with pytest.raises(StateError) as e:
            verify_proof(root, lie)
        assert e.value.kind == "ValueMismatch"
        node = bytearray(proof["account_proof"][0])
        node[-1] ^= 1
        bad = dict(proof, account_proof=[bytes(node)] + proof["account_proof"][1:])
        with pytest.raises(StateError):
            verify_proof(root, bad)
        with pytest.raises(StateError):
            verify_proof(b"\x00" * 32, proof)
        with pytest.raises(ValueError):
            verify_proof(root, {"address": A})


def test_forks_and_block_lifecycle():
    with Db() as db:
        base = db.begin()
        base.set_account(A, balance=1)
        base_id, base_root = base.commit()
        left = db.begin(base_id)
        left.set_account(B, balance=2)
        right = db.begin(base_id)
        right.set_account(B, balance=3)
        lid, lroot = left.commit()
        rid, rroot = right.commit()
        assert len({base_root, lroot, rroot}) == 3
        assert db.get_account(B, block=lid).balance == 2
        assert db.get_account(B, block=rid).balance == 3
        assert db.get_account(B, block=base_id) is None
        with pytest.raises(StateError) as e:
            left.set_account(A, balance=5)
        assert e.value.kind == "BlockClosed"
        with pytest.raises(StateError) as e:
            left.commit()
        assert e.value.kind == "BlockClosed"
        db.finalize(rid)
        with pytest.raises(StateError) as e:
            db.root(lid)  # the other fork was dropped
        assert e.value.kind == "UnknownBlock"
        with pytest.raises(StateError) as e:
            db.begin(base_id)
        assert e.value.kind in ("UnknownBlock", "NotDescendant")
        # A block whose body raises is discarded.
        with pytest.raises(KeyError):
            with db.begin() as b:
                b.set_account(A, balance=7)
                raise KeyError("abort")
        assert b.id is None and db.get_account(A).balance == 1
        # Deleting an account removes it and its storage.
        with db.begin() as d:
            d.set_storage(A, 1, 5)
            d.delete_account(A)
            assert d.get_account(A) is None and d.get_storage(A, 1) == 0


def test_bad_input():
    with Db() as db:
        b = db.begin()
        with pytest.raises(ValueError):
            b.set_account(b"\x01" * 19)
        with pytest.raises(ValueError):
            b.set_account(A, balance=2**256)
        with pytest.raises(ValueError):
            b.set_account(A, balance=-1)
        with pytest.raises(TypeError):
            b.set_account(A, balance="10")
        with pytest.raises(TypeError):
            b.set_account("0x" + "aa" * 20)
        with pytest.raises(ValueError):
            b.set_storage(A, b"\x01" * 31, 1)
        with pytest.raises(StateError) as e:
            b.set_storage(A, 1, 1)  # no such account
        assert e.value.kind == "NoSuchAccount"
        with pytest.raises(StateError) as e:
            db.begin(999)
        assert e.value.kind == "UnknownBlock"
        with pytest.raises(StateError) as e:
            db.finalize(999)
        assert e.value.kind == "UnknownBlock"
    with pytest.raises(ValueError):
        Db(commit_level="sometimes")


def test_not_a_store(tmp_path):
    d = tmp_path / "junk"
    d.mkdir()
    (d / "state.pk").write_bytes(b"this is not a page store" * 500)
    with pytest.raises(StateError) as e:
        Db(d)
    assert e.value.kind == "Store"
