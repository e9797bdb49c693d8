"""An embedded Ethereum state database (secure Merkle-Patricia trie over a memory-mapped page
store), with blocks and forks::

    from proofkit.state import Db, verify_proof

    with Db("/tmp/chain") as db:                 # Db() keeps everything in memory
        with db.begin() as block:                # on the finalized block; commits on exit
            block.set_account(addr, nonce=1, balance=10**18)
            block.set_storage(addr, 0, 42)
        db.finalize(block.id)
        proof = db.get_proof(addr, [0])
        verify_proof(db.root(), proof)

Addresses are 20 bytes, slots 32 bytes or an int, balances and values ints below 2**256.
Errors are :class:`~proofkit.errors.StateError` with a ``kind``.
"""

from __future__ import annotations

from ._proofkit import state as _native
from .errors import StateError

Db = _native.Db
Block = _native.Block
Account = _native.Account
verify_proof = _native.verify_proof
EMPTY_ROOT: bytes = _native.EMPTY_ROOT
KECCAK_EMPTY: bytes = _native.KECCAK_EMPTY

__all__ = ["Db", "Block", "Account", "verify_proof", "EMPTY_ROOT", "KECCAK_EMPTY", "StateError"]
