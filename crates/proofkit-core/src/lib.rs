//! Shared plumbing for the proofkit engines, and nothing engine-specific:
//!
//! * [`cpu`]: CPU feature detection, done once;
//! * [`memory`]: large, page-aligned buffers backed by hugetlb pages, transparent huge pages or
//!   4 KiB pages, reporting which they got;
//! * [`affinity`]: pinning the calling thread to a core;
//! * [`peak`]: peak resident memory (RSS from `/proc/self/status`, USS from
//!   `/proc/self/smaps_rollup`, sampled);
//! * [`report`]: benchmark tables (markdown) and JSON rows;
//! * [`cputime`]: the calling thread's CPU time (a benchmark clock for loaded machines).

pub mod affinity;
pub mod cpu;
pub mod cputime;
pub mod memory;
pub mod peak;
pub mod report;
