"""The recursive SHA-256 verifiable delay function (``h <- SHA256(h)``, as in MMX).

* :func:`chain` runs ``iterations`` links from a 32-byte start;
* :func:`prove` runs the chain once, recording a checkpoint every ``segment`` links, and returns
  the proof file as bytes (optional ``infusions``: 32-byte values folded into the start first);
* :func:`verify` checks every segment in parallel and returns the output, or raises
  :class:`~proofkit.errors.VdfError` (``kind="BadSegment"`` with ``segment``, or the file
  defect);
* :func:`proof_info` reads a proof's fields.
"""

from __future__ import annotations

from ._proofkit import vdf as _native
from .errors import VdfError

chain = _native.chain
prove = _native.prove
verify = _native.verify
proof_info = _native.proof_info

__all__ = ["chain", "prove", "verify", "proof_info", "VdfError"]
