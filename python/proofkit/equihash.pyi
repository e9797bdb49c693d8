"""Type stubs of proofkit.equihash (see the module docstring in equihash.py)."""

from typing import Optional, Sequence, Union

from .errors import EquihashError as EquihashError

Buffer = Union[bytes, bytearray, memoryview]
Nonce = Union[Buffer, int]

ZCASH_PERSONALIZATION: bytes

def solve(
    n: int,
    k: int,
    header: Buffer,
    nonce: Nonce,
    personalization: Optional[Buffer] = None,
    mode: str = "full",
    height: Optional[int] = None,
    threads: int = 1,
) -> list[list[int]]:
    """Every solution of ``header || nonce`` (GIL released). ``mode``: ``"full"``, ``"pr"``
    (post-retrieval, ``height`` default 1) or ``"em"`` (tables spilled to a temp file)."""

def verify(
    n: int,
    k: int,
    header: Buffer,
    nonce: Nonce,
    solution: Union[Buffer, Sequence[int]],
    personalization: Optional[Buffer] = None,
) -> None:
    """None when valid; raises ``EquihashError`` (``kind``, ``level``, ``position``)."""

def is_valid(
    n: int,
    k: int,
    header: Buffer,
    nonce: Nonce,
    solution: Union[Buffer, Sequence[int]],
    personalization: Optional[Buffer] = None,
) -> bool: ...
def encode_minimal(n: int, k: int, indices: Sequence[int]) -> bytes: ...
def decode_minimal(n: int, k: int, data: Buffer) -> list[int]: ...
def params_info(n: int, k: int) -> dict[str, int]:
    """``n``, ``k``, ``collision_bits``, ``index_bits``, ``solution_len``, ``minimal_len``."""
