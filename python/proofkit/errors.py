"""The exceptions of proofkit: every error the engines report is a :class:`ProofkitError`.

Each carries ``kind``, the name of the engine's error variant (for example ``"Collision"`` for an
Equihash solution whose subtrees do not collide), so that callers can branch on it without
parsing messages. Mistakes in the arguments themselves (a 19-byte address, an unknown mode)
raise the usual ``TypeError``/``ValueError`` instead.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["ProofkitError", "RandomxError", "EquihashError", "VdfError", "StateError"]


class ProofkitError(Exception):
    """Base class of proofkit's errors. ``kind`` names the engine's error variant."""

    kind: Optional[str]

    def __init__(self, message: str, kind: Optional[str] = None) -> None:
        super().__init__(message)
        self.kind = kind


class RandomxError(ProofkitError):
    """A RandomX failure: ``kind`` is one of ``"Memory"``, ``"Argon2"``,
    ``"CacheNotInitialized"``, ``"ItemRange"``, ``"NoPendingHash"``, ``"NoDataset"``,
    ``"InUse"``."""


class EquihashError(ProofkitError):
    """An Equihash rejection or solver failure.

    For a rejected solution ``kind`` is the verifier's rule: ``"BadLength"``,
    ``"IndexOutOfRange"``, ``"Collision"``, ``"OutOfOrder"``, ``"DuplicateIdxs"``,
    ``"NonZeroRoot"`` (plus ``"BadCount"`` from the encoding helpers); ``level`` and
    ``position`` locate the failing merge for the tree rules. The solver reports
    ``"TooLarge"``, ``"BadHeight"``, ``"Blowup"`` or ``"Io"``.
    """

    level: Optional[int] = None
    position: Optional[int] = None


class VdfError(ProofkitError):
    """A VDF proof that does not hold: ``kind`` is ``"BadSegment"`` (with ``segment``, the
    0-based index of the first segment that misses its checkpoint, and ``segments``) or the
    name of the proof-file defect (``"Checksum"``, ``"Truncated"``, ``"BadMagic"``, ...)."""

    segment: Optional[int] = None
    segments: Optional[int] = None


class StateError(ProofkitError):
    """A state-database failure: ``kind`` is ``"UnknownBlock"``, ``"NotDescendant"``,
    ``"NoSuchAccount"``, ``"RootMismatch"``, ``"CorruptRecord"``, ``"Store"``, ``"Failed"``
    (a finalization failed earlier: reopen the database), ``"Closed"``, ``"BlockClosed"``, or a proof defect (``"HashMismatch"``, ``"Truncated"``, ``"Trailing"``,
    ``"Malformed"``, ``"ValueMismatch"``)."""
