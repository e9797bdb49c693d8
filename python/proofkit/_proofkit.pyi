"""The native extension (Rust, PyO3); use the public submodules instead."""

from typing import Any

__version__: str
randomx: Any
equihash: Any
vdf: Any
state: Any
