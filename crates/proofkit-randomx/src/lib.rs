//! RandomX
