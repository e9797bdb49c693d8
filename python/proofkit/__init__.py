"""proofkit: proof-of-work and proof engines for Python (RandomX, Equihash, a SHA-256 VDF and an
Ethereum state store), backed by the proofkit Rust workspace.

Submodules: :mod:`proofkit.randomx`, :mod:`proofkit.equihash`, :mod:`proofkit.vdf`,
:mod:`proofkit.state`; errors in :mod:`proofkit.errors`. Heavy calls release the GIL.
"""

from . import equihash, randomx, state, vdf
from ._proofkit import __version__
from .errors import EquihashError, ProofkitError, RandomxError, StateError, VdfError

__all__ = [
    "randomx",
    "equihash",
    "vdf",
    "state",
    "ProofkitError",
    "RandomxError",
    "EquihashError",
    "VdfError",
    "StateError",
    "__version__",
]
