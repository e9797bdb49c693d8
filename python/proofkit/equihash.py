"""Equihash as Zcash defines it (BLAKE2b personalization ``ZcashPoW || le32(n) || le32(k)``;
input ``header || nonce``), with other 8-byte personalizations for other coins.

* :func:`solve` finds every solution (modes ``"full"``, ``"pr"`` with a ``height``, ``"em"``;
  ``threads`` workers) and returns them as lists of ``2**k`` indices;
* :func:`verify` accepts a minimal-encoded solution (bytes) or a list of indices; it returns
  None or raises :class:`~proofkit.errors.EquihashError` whose ``kind`` names the broken rule;
  :func:`is_valid` is the boolean form;
* :func:`encode_minimal` / :func:`decode_minimal` convert between the two forms.

A nonce is bytes as given, or an int taken as 32 little-endian bytes.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from ._proofkit import equihash as _native
from .errors import EquihashError

ZCASH_PERSONALIZATION: bytes = _native.ZCASH_PERSONALIZATION

solve = _native.solve
verify = _native.verify
encode_minimal = _native.encode_minimal
decode_minimal = _native.decode_minimal
params_info = _native.params_info


def is_valid(
    n: int,
    k: int,
    header: bytes,
    nonce: Union[bytes, int],
    solution: Union[bytes, Sequence[int]],
    personalization: Optional[bytes] = None,
) -> bool:
    """True when :func:`verify` accepts the solution, False when it rejects it (other errors,
    such as unusable parameters, still raise)."""
    try:
        _native.verify(n, k, header, nonce, solution, personalization)
    except EquihashError:
        return False
    return True


__all__ = [
    "ZCASH_PERSONALIZATION",
    "solve",
    "verify",
    "is_valid",
    "encode_minimal",
    "decode_minimal",
    "params_info",
    "EquihashError",
]
