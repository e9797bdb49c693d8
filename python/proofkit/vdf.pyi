"""Type stubs of proofkit.vdf (see the module docstring in vdf.py)."""

from typing import Any, Callable, Optional, Sequence, Union

from .errors import VdfError as VdfError

Buffer = Union[bytes, bytearray, memoryview]

def chain(start: Buffer, iterations: int) -> bytes:
    """``iterations`` links of ``h <- SHA256(h)`` from the 32-byte ``start``."""

def prove(
    start: Buffer,
    iterations: int,
    segment: int,
    infusions: Sequence[Buffer] = ...,
    progress: Optional[Callable[[int, int], object]] = None,
) -> bytes:
    """The proof file (bytes) of ``iterations`` links with a checkpoint every ``segment``."""

def verify(proof: Buffer, threads: int = 0) -> bytes:
    """The VDF output when every segment holds; raises ``VdfError`` otherwise."""

def proof_info(proof: Buffer) -> dict[str, Any]:
    """start, infusions, iterations, segment, checkpoints, seed, output."""
