//! Large, page-aligned, zero-initialised anonymous memory for datasets, caches and scratchpads.
//!
//! The page size matters enormously for RandomX-style random access (on a 2-core Cascade Lake
//! the reference runs 3.9x faster in fast mode with 2 MiB pages). [`LargeBuffer::new`] tries, in
//! order: explicit hugetlb pages (`MAP_HUGETLB`, only when asked, since they must be reserved by
//! root: 1 GiB pages for buffers of at least 1 GiB when the pool of
//! `/sys/kernel/mm/hugepages/hugepages-1048576kB` has enough free, as xmrig does for the RandomX
//! dataset, else 2 MiB pages from `/proc/sys/vm/nr_hugepages`), transparent huge pages
//! (`madvise(MADV_HUGEPAGE)` on a 2 MiB-aligned region; works without configuration when THP is
//! `always` or `madvise`), and plain 4 KiB pages. It reports which one it got as a [`PageKind`].

use std::fmt;

const HUGE_PAGE: usize = 2 << 20;
const GIANT_PAGE: usize = 1 << 30;

/// What backs a [`LargeBuffer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum PageKind {
    /// Reserved 2 MiB hugetlb pages (`MAP_HUGETLB`).
    Hugetlb2M,
    /// Reserved 1 GiB hugetlb pages (`MAP_HUGETLB | MAP_HUGE_1GB`).
    Hugetlb1G,
    /// Transparent huge pages requested with `madvise(MADV_HUGEPAGE)`.
    Transparent2M,
    /// Ordinary 4 KiB pages.
    Small4K,
    /// A heap allocation (non-Linux fallback).
    Heap,
}

impl fmt::Display for PageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageKind::Hugetlb2M => "2 MiB hugetlb",
            PageKind::Hugetlb1G => "1 GiB hugetlb",
            PageKind::Transparent2M => "2 MiB transparent (THP madvise)",
            PageKind::Small4K => "4 KiB",
            PageKind::Heap => "heap",
        })
    }
}

impl PageKind {
    /// Reserved hugetlb pages of either size.
    pub fn is_hugetlb(self) -> bool {
        matches!(self, PageKind::Hugetlb2M | PageKind::Hugetlb1G)
    }

    /// Pages of 2 MiB or more, reserved or transparent.
    pub fn is_large(self) -> bool {
        matches!(
            self,
            PageKind::Hugetlb2M | PageKind::Hugetlb1G | PageKind::Transparent2M
        )
    }
}

/// Which page sizes a caller will accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PagePolicy {
    /// Try hugetlb, then THP, then 4 KiB.
    HugetlbFirst,
    /// Try THP, then 4 KiB (no configuration needed).
    #[default]
    Transparent,
    /// 4 KiB pages only (for measuring the page-size effect).
    SmallOnly,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("cannot map {bytes} bytes: {source}")]
    Map {
        bytes: usize,
        source: std::io::Error,
    },
    #[error("zero-sized buffer requested")]
    Empty,
}

/// An owned, zero-initialised, page-aligned byte region.
pub struct LargeBuffer {
    ptr: *mut u8,
    len: usize,
    /// What munmap must be given back (the region may have been over-mapped for alignment).
    map_ptr: *mut u8,
    map_len: usize,
    kind: PageKind,
}

// SAFETY: LargeBuffer owns its mapping exclusively, like a Box<[u8]>; shared access only hands
// out &[u8] and mutable access requires &mut self.
unsafe impl Send for LargeBuffer {}
// SAFETY: see above; &LargeBuffer only yields shared reads.
unsafe impl Sync for LargeBuffer {}

impl LargeBuffer {
    /// Maps `len` zeroed bytes following `policy`.
    pub fn new(len: usize, policy: PagePolicy) -> Result<Self, MemoryError> {
        if len == 0 {
            return Err(MemoryError::Empty);
        }
        #[cfg(target_os = "linux")]
        {
            if policy == PagePolicy::HugetlbFirst {
                if let Some(b) = Self::map_hugetlb(len) {
                    return Ok(b);
                }
            }
            Self::map_anonymous(len, policy != PagePolicy::SmallOnly)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = policy;
            let v = vec![0u8; len].into_boxed_slice();
            let len = v.len();
            let ptr = Box::into_raw(v) as *mut u8;
            Ok(LargeBuffer {
                ptr,
                len,
                map_ptr: ptr,
                map_len: len,
                kind: PageKind::Heap,
            })
        }
    }

    /// Reserved pages: 1 GiB ones for a buffer of at least 1 GiB (the whole buffer on them or
    /// none: the mapping fails when the pool lacks pages), else 2 MiB ones. A 2,080 MiB RandomX
    /// dataset takes three 1 GiB pages and leaves most of the third unused, as in xmrig; with it
    /// in 1 GiB pages fast-mode hashing measured ~2.5% less CPU per hash than on 2 MiB pages
    /// (README, session 10).
    #[cfg(target_os = "linux")]
    fn map_hugetlb(len: usize) -> Option<Self> {
        (len >= GIANT_PAGE)
            .then(|| Self::map_reserved(len, GIANT_PAGE, libc::MAP_HUGE_1GB, PageKind::Hugetlb1G))
            .flatten()
            .or_else(|| Self::map_reserved(len, HUGE_PAGE, 0, PageKind::Hugetlb2M))
    }

    /// `len` bytes on reserved pages of `page` bytes (`size_flag` names the size to mmap; 0 is
    /// the pool's default, 2 MiB), populated; `None` when the pool lacks pages.
    #[cfg(target_os = "linux")]
    fn map_reserved(len: usize, page: usize, size_flag: i32, kind: PageKind) -> Option<Self> {
        let map_len = len.div_ceil(page) * page;
        // SAFETY: an anonymous private mapping with no address hint has no preconditions; the
        // result is checked against MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_HUGETLB
                    | libc::MAP_POPULATE
                    | size_flag,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let p = p as *mut u8;
        Some(LargeBuffer {
            ptr: p,
            len,
            map_ptr: p,
            map_len,
            kind,
        })
    }

    #[cfg(target_os = "linux")]
    fn map_anonymous(len: usize, want_thp: bool) -> Result<Self, MemoryError> {
        let thp = want_thp && len >= HUGE_PAGE && thp_available();
        // Over-map by one huge page so that the used region can start on a 2 MiB boundary:
        // THP only backs aligned 2 MiB extents.
        let map_len = if thp { len + HUGE_PAGE } else { len };
        // SAFETY: as in map_hugetlb.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MemoryError::Map {
                bytes: len,
                source: std::io::Error::last_os_error(),
            });
        }
        let map_ptr = p as *mut u8;
        if !thp {
            return Ok(LargeBuffer {
                ptr: map_ptr,
                len,
                map_ptr,
                map_len,
                kind: PageKind::Small4K,
            });
        }
        let offset = (HUGE_PAGE - (map_ptr as usize) % HUGE_PAGE) % HUGE_PAGE;
        // SAFETY: offset < HUGE_PAGE and map_len = len + HUGE_PAGE, so [ptr, ptr+len) lies inside
        // the mapping.
        let ptr = unsafe { map_ptr.add(offset) };
        // SAFETY: madvise on a sub-range of our own mapping; failure only means no THP.
        let advised =
            unsafe { libc::madvise(ptr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) } == 0;
        let kind = if advised {
            PageKind::Transparent2M
        } else {
            PageKind::Small4K
        };
        Ok(LargeBuffer {
            ptr,
            len,
            map_ptr,
            map_len,
            kind,
        })
    }

    pub fn kind(&self) -> PageKind {
        self.kind
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zero-filled by the kernel) bytes for our lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Views the buffer as u64 words (the buffer is page-aligned, so alignment always holds;
    /// a trailing partial word is not included).
    pub fn as_u64_slice(&self) -> &[u64] {
        // SAFETY: page alignment >= 8; the length is rounded down to whole words.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u64, self.len / 8) }
    }

    pub fn as_u64_slice_mut(&mut self) -> &mut [u64] {
        // SAFETY: as above, exclusive through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u64, self.len / 8) }
    }

    /// Views the buffer as u32 words (page alignment >= 4; a trailing partial word is dropped).
    pub fn as_u32_slice(&self) -> &[u32] {
        // SAFETY: page alignment >= 4; the length is rounded down to whole words.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u32, self.len / 4) }
    }

    pub fn as_u32_slice_mut(&mut self) -> &mut [u32] {
        // SAFETY: as above, exclusive through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u32, self.len / 4) }
    }

    /// Puts the part of a transparent-huge-page buffer from the 2 MiB page holding `offset` on
    /// 4 KiB pages (the pages wholly before `offset` stay huge); to be called before that part
    /// is touched. A buffer used to an extent known only as it is filled then holds the 4 KiB
    /// pages touched past `offset` instead of whole 2 MiB pages (Equihash `em`'s pool left a
    /// third of its last huge page unused). Returns whether the advice was taken: false for
    /// other kinds of pages, an offset past the end, or a kernel that refuses.
    pub fn small_pages_from(&mut self, offset: usize) -> bool {
        let from = offset / HUGE_PAGE * HUGE_PAGE;
        if self.kind != PageKind::Transparent2M || from >= self.len {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: madvise on a sub-range of our own mapping ([ptr + from, ptr + len), with
            // from < len), which changes only how its pages are backed, not its contents.
            unsafe {
                libc::madvise(
                    self.ptr.add(from) as *mut libc::c_void,
                    self.len - from,
                    libc::MADV_NOHUGEPAGE,
                ) == 0
            }
        }
        #[cfg(not(target_os = "linux"))]
        false
    }
}

impl Drop for LargeBuffer {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: map_ptr/map_len are exactly what mmap returned and nothing else unmaps them.
        unsafe {
            libc::munmap(self.map_ptr as *mut libc::c_void, self.map_len);
        }
        #[cfg(not(target_os = "linux"))]
        // SAFETY: built from Box::into_raw of a boxed slice of map_len bytes.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.map_ptr,
                self.map_len,
            )));
        }
    }
}

impl fmt::Debug for LargeBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LargeBuffer")
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

/// True when the kernel honours `MADV_HUGEPAGE` (THP mode `always` or `madvise`).
pub fn thp_available() -> bool {
    match std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
        Ok(s) => s.contains("[always]") || s.contains("[madvise]"),
        Err(_) => false,
    }
}

/// Number of free reserved hugetlb pages (`HugePages_Free` in /proc/meminfo).
pub fn free_hugetlb_pages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("HugePages_Free:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Hints the CPU to bring the cache line holding `value` into all cache levels. A hint only:
/// never faults, never changes results.
#[inline(always)]
pub fn prefetch_read<T>(value: &T) {
    prefetch_line::<true>(value as *const T as *const u8);
}

/// Hints the CPU to bring the cache line holding `value` into the L2 cache (and the levels
/// below it), not L1: for a line written much later, after enough other traffic that it
/// would have left L1 again (scattered writes into many buckets). A hint only.
#[inline(always)]
pub fn prefetch_read_l2<T>(value: &T) {
    prefetch_line::<false>(value as *const T as *const u8);
}

/// [`prefetch_read`] for the whole of `value`: the lines at every 64 bytes from its start
/// (a value of several lines whose reads will follow one another). A hint only.
#[inline(always)]
pub fn prefetch_read_all<T>(value: &T) {
    let base = value as *const T as *const u8;
    for offset in (0..std::mem::size_of::<T>()).step_by(64) {
        prefetch_address(base, offset);
    }
}

/// Hints that the cache line at `base + offset` will be read soon. Takes a raw address (computed
/// with wrapping arithmetic, never dereferenced) for reads whose target is only known as an
/// index into memory another borrow is using.
#[inline(always)]
pub fn prefetch_address(base: *const u8, offset: usize) {
    prefetch_line::<true>(base.wrapping_add(offset));
}

/// [`prefetch_read_l2`] for the line at `base + offset` (computed with wrapping arithmetic,
/// never dereferenced).
#[inline(always)]
pub fn prefetch_address_l2(base: *const u8, offset: usize) {
    prefetch_line::<false>(base.wrapping_add(offset));
}

/// PREFETCHT0 (`TO_L1`) or PREFETCHT1 of the line at `addr`; nothing off x86-64.
#[inline(always)]
fn prefetch_line<const TO_L1: bool>(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0/T1 have no architectural effect and cannot fault, whatever the
    // address; SSE is part of the x86-64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        if TO_L1 {
            _mm_prefetch::<_MM_HINT_T0>(addr as *const i8)
        } else {
            _mm_prefetch::<_MM_HINT_T1>(addr as *const i8)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Copies `src` into `dst` (equal lengths, a multiple of 64 bytes, `dst` 64-byte aligned) with
/// non-temporal stores: the destination's lines are written without being read first. For a
/// page written once and not read again soon (a copy-on-write page store's new page), a plain
/// store first reads each line it writes (a read for ownership), so the copy moves twice the
/// bytes it writes through the memory bus; the streaming stores move them once, and leave the
/// caches to the data still being read. Call [`streaming_fence`] before another thread may
/// read `dst`: streaming stores are weakly ordered, and a release store does not order them.
/// `PROOFKIT_FORCE_PORTABLE=1` (or another architecture) makes it a plain copy.
#[inline]
pub fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_streaming: lengths differ");
    assert!(
        dst.len().is_multiple_of(64) && (dst.as_ptr() as usize).is_multiple_of(64),
        "copy_streaming: the destination is not whole aligned lines"
    );
    #[cfg(target_arch = "x86_64")]
    if !streaming_forced_portable() {
        // SAFETY: SSE2 is part of the x86-64 baseline; every load reads 16 bytes inside `src`
        // and every store writes 16 bytes inside `dst` (equal lengths, multiples of 64,
        // asserted above), each store's address 16-byte aligned as MOVNTDQ requires (`dst` is
        // 64-byte aligned); `&mut dst` and `&src` cannot overlap.
        unsafe {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
            let (d, s) = (
                dst.as_mut_ptr() as *mut __m128i,
                src.as_ptr() as *const __m128i,
            );
            for i in 0..dst.len() / 16 {
                _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i)));
            }
        }
        return;
    }
    dst.copy_from_slice(src);
}

/// Orders the streaming stores of [`copy_streaming`] before every later store (SFENCE): once
/// it returns, a release store (a lock, an atomic) publishes them like any other write.
#[inline]
pub fn streaming_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE has no operands and cannot fault; SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Whether `PROOFKIT_FORCE_PORTABLE` asked for plain copies (read once).
fn streaming_forced_portable() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| crate::cpu::env_flag("PROOFKIT_FORCE_PORTABLE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copy_writes_what_a_plain_copy_writes() {
        // The same bytes whichever path runs (under PROOFKIT_FORCE_PORTABLE=1 the plain copy).
        let mut dst = LargeBuffer::new(3 * 4096, PagePolicy::SmallOnly).unwrap();
        let src: Vec<u8> = (0..3 * 4096 + 7).map(|i| (i * 131 % 251) as u8).collect();
        for (offset, len) in [(0, 4096), (4096, 64), (4096 + 64, 8192 - 64), (128, 0)] {
            // An unaligned source: the loads need no alignment.
            let from = &src[7..7 + len];
            copy_streaming(&mut dst.as_mut_slice()[offset..offset + len], from);
            streaming_fence();
            assert_eq!(&dst.as_slice()[offset..offset + len], from);
        }
    }

    #[test]
    fn streaming_copy_refuses_unaligned_destinations() {
        let mut dst = LargeBuffer::new(4096, PagePolicy::SmallOnly).unwrap();
        let src = [1u8; 128];
        let d = dst.as_mut_slice();
        for (offset, len) in [(8, 64), (0, 100)] {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                copy_streaming(&mut d[offset..offset + len], &src[..len])
            }));
            assert!(r.is_err(), "offset {offset}, {len} bytes");
        }
    }

    #[test]
    fn small_pages_are_zeroed_and_writable() {
        let mut b = LargeBuffer::new(10_000, PagePolicy::SmallOnly).unwrap();
        assert_eq!(b.kind(), PageKind::Small4K);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[9_999] = 7;
        assert_eq!(b.as_slice()[9_999], 7);
        assert_eq!(b.as_u64_slice().len(), 1250);
    }

    #[test]
    fn thp_region_is_aligned() {
        let b = LargeBuffer::new(6 << 20, PagePolicy::Transparent).unwrap();
        if thp_available() {
            assert_eq!(b.kind(), PageKind::Transparent2M);
            assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0);
        } else {
            eprintln!("skipped: THP not available on this kernel");
        }
    }

    /// Pages resident in `[at, at + len)` of `b`, 4 KiB each (mincore).
    #[cfg(target_os = "linux")]
    fn resident(b: &LargeBuffer, at: usize, len: usize) -> usize {
        let mut v = vec![0u8; len / 4096];
        // SAFETY: a page-aligned sub-range of the buffer's mapping, and one status byte per
        // 4 KiB page in `v`.
        let rc =
            unsafe { libc::mincore(b.as_ptr().add(at) as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(rc, 0);
        v.iter().filter(|&&x| x & 1 == 1).count()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn small_pages_from_keeps_the_tail_on_4k_pages() {
        let mut b = LargeBuffer::new(8 << 20, PagePolicy::Transparent).unwrap();
        if b.kind() != PageKind::Transparent2M {
            eprintln!("skipped: THP not available on this kernel");
            assert!(!b.small_pages_from(1 << 20));
            return;
        }
        assert!(!b.small_pages_from(8 << 20), "past the end");
        // From 2 MiB (the page holding 3 MiB) on: the first huge page stays.
        assert!(b.small_pages_from(3 << 20));
        b.as_mut_slice()[(2 << 20) + 100] = 1;
        b.as_mut_slice()[(6 << 20) + 100] = 2;
        // One 4 KiB page each, not the 2 MiB around them.
        assert_eq!(resident(&b, 2 << 20, 2 << 20), 1);
        assert_eq!(resident(&b, 6 << 20, 2 << 20), 1);
        assert_eq!(b.as_slice()[(6 << 20) + 100], 2);
        assert_eq!(
            b.as_slice()[2 << 20..].iter().filter(|&&x| x != 0).count(),
            2
        );
    }

    #[test]
    fn hugetlb_falls_back_cleanly() {
        let b = LargeBuffer::new(4 << 20, PagePolicy::HugetlbFirst).unwrap();
        // Under 1 GiB: never 1 GiB pages.
        assert!(matches!(
            b.kind(),
            PageKind::Hugetlb2M | PageKind::Transparent2M | PageKind::Small4K
        ));
        assert!(b.as_slice().iter().all(|&x| x == 0));
    }

    fn free_giant_pages() -> u64 {
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn giant_pages_back_a_gib_buffer_when_reserved() {
        let before = free_giant_pages();
        let len = (1 << 30) + 4096;
        let mut b = LargeBuffer::new(len, PagePolicy::HugetlbFirst).unwrap();
        if b.kind() == PageKind::Hugetlb1G {
            // Two pages: the whole buffer on 1 GiB pages, the map a whole number of them.
            assert_eq!(b.as_ptr() as usize % GIANT_PAGE, 0);
            assert_eq!(b.len(), len);
            let s = b.as_mut_slice();
            assert_eq!((s[0], s[len / 2], s[len - 1]), (0, 0, 0));
            s[len - 1] = 9;
            assert_eq!(b.as_slice()[len - 1], 9);
            assert!(b.kind().is_hugetlb() && b.kind().is_large());
            drop(b);
        } else if before >= 2 && free_giant_pages() >= 2 {
            panic!("two free 1 GiB pages, but the buffer got {}", b.kind());
        } else {
            eprintln!(
                "skipped: fewer than two free 1 GiB hugetlb pages (root: echo 3 > \
                 /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages); got {}",
                b.kind()
            );
            assert!(b.kind() != PageKind::Hugetlb1G);
        }
        // Below 1 GiB the 2 MiB pool (or THP) serves, whatever the 1 GiB pool holds.
        let small = LargeBuffer::new(GIANT_PAGE - HUGE_PAGE, PagePolicy::HugetlbFirst).unwrap();
        assert_ne!(small.kind(), PageKind::Hugetlb1G);
    }

    #[test]
    fn empty_is_an_error() {
        assert!(matches!(
            LargeBuffer::new(0, PagePolicy::Transparent),
            Err(MemoryError::Empty)
        ));
    }
}
