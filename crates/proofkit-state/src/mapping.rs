//! The page store's memory mapping, shared by the writer and the readers of past versions (one
//! of the crate's three modules with `unsafe`, beside the AVX-512 Keccak kernel and `unique`).
//!
//! The store reserves one large range of address space once (a file mapped `MAP_SHARED` past its
//! end, or anonymous memory with `MAP_NORESERVE`) and never moves it: the file only grows under
//! the mapping, so a page address stays valid for the life of the store and readers on other
//! threads can hold page slices while the writer goes on.
//!
//! Soundness rests on the store's copy-on-write discipline, which this module cannot check:
//! the writer only writes pages that no committed root still needed by a reader can reach (fresh
//! pages, or pages freed once every reader that could see them is gone), and readers only read
//! pages reachable from the root they hold. So a page is never written while another thread
//! reads it.

use std::fs::File;
use std::io;

/// One page of the store.
pub(crate) const PAGE: usize = 4096;

/// A fixed range of address space holding the pages.
pub(crate) struct Pages {
    base: *mut u8,
    reserved: usize,
    file: Option<File>,
}

// SAFETY: `Pages` is a fixed mapping; concurrent access follows the copy-on-write discipline in
// the module doc (no page is written while another thread can read it).
unsafe impl Send for Pages {}
// SAFETY: as above.
unsafe impl Sync for Pages {}

impl Pages {
    /// Maps `file` (read-write, shared) at a reservation of `reserved` bytes; only the part
    /// inside the file may be touched.
    pub(crate) fn file(file: File, reserved: usize) -> io::Result<Pages> {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh mapping chosen by the kernel (no fixed address), of a file this store
        // owns; the pointer is checked for failure below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // No read-ahead, so that the page cache of the file is made of one-page folios: with
        // the large folios that read-ahead builds, a write fault dirties a whole folio and each
        // commit's `msync` writes it whole. The full 50,000-block run on disk wrote 7.7 TB by
        // block 38,000 with large folios and 647 GB in all with this advice, and ran 1.5x
        // faster; the kernel's share of the CPU rose (more faults, more folios to write back).
        // A hint: its failure leaves the kernel's default.
        // SAFETY: advice on the mapping just made, over exactly its range; it changes no
        // contents and no permission.
        unsafe { libc::madvise(base, reserved, libc::MADV_RANDOM) };
        Ok(Pages {
            base: base.cast(),
            reserved,
            file: Some(file),
        })
    }

    /// Anonymous zeroed memory of up to `reserved` bytes, backed only where touched, and its
    /// first `prefault` bytes backed at once ([`Pages::prefault`]).
    pub(crate) fn anonymous(reserved: usize, prefault: usize) -> io::Result<Pages> {
        // SAFETY: as in `file`, without a file.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // 2 MiB pages where the kernel has them (transparent huge pages in `madvise` mode, the
        // default here): a lookup touches ~4 pages scattered over gigabytes, and with 4 KiB
        // pages each costs a TLB miss and a page walk whose tables miss the cache too. The
        // in-memory Paprika run read back 1.2-1.3x faster at 2M accounts with them, writes
        // unchanged. A hint: its failure (no THP) leaves 4 KiB pages.
        // SAFETY: advice on the mapping just made, over exactly its range; it changes no
        // contents and no permission.
        unsafe { libc::madvise(base, reserved, libc::MADV_HUGEPAGE) };
        let pages = Pages {
            base: base.cast(),
            reserved,
            file: None,
        };
        pages.prefault(prefault)?;
        Ok(pages)
    }

    /// Backs the first `bytes` of a fresh anonymous reservation with zeroed memory now, as
    /// Paprika's in-memory database clears its whole size when it is made: the kernel's first
    /// touch of a page (a fault, and zeroing a 2 MiB page; 0.45 GB/s on this VM, whose freed
    /// memory goes back to the host) is then paid at open, not by the first writes. Returns
    /// the bytes backed. `anonymous` calls it on the reservation it has just made (the tests
    /// call it again, with no slice of the mapping alive).
    fn prefault(&self, bytes: usize) -> io::Result<usize> {
        debug_assert!(self.file.is_none());
        let len = bytes.min(self.reserved).div_ceil(PAGE) * PAGE;
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: advice over a range inside the mapping made by `anonymous`; populating
        // writes nothing a reader could see (the pages stay zero).
        let r = unsafe { libc::madvise(self.base.cast(), len, libc::MADV_POPULATE_WRITE) };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
            // A kernel before 5.14 (no MADV_POPULATE_WRITE): one write a page.
            for o in (0..len).step_by(PAGE) {
                // SAFETY: inside the reservation, and no slice of it is alive (see the doc:
                // a fresh reservation, or the tests' between reads); the byte written is the
                // zero already there.
                unsafe { std::ptr::write_volatile(self.base.add(o), 0) };
            }
        }
        Ok(len)
    }

    /// Pages the reservation can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.reserved / PAGE
    }

    pub(crate) fn file_handle(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Page `id`. The caller keeps `id` below the backed length (the store bounds every page id
    /// by its page count, and the file is grown before a page past it is used).
    pub(crate) fn page(&self, id: u32) -> &[u8] {
        let o = id as usize * PAGE;
        assert!(
            o + PAGE <= self.reserved,
            "page {id} beyond the reservation"
        );
        // SAFETY: inside the reservation (checked above); see the module doc for why no other
        // thread writes this page meanwhile.
        unsafe { std::slice::from_raw_parts(self.base.add(o), PAGE) }
    }

    /// Starts loading the cache line at byte `offset` of page `id` into the cache, so that
    /// lookups of many keys can wait for their pages together instead of one after another
    /// (a hint: it never faults, so a page past the file or the reservation is harmless).
    #[inline]
    pub(crate) fn prefetch(&self, id: u32, offset: usize) {
        let o = (id as usize * PAGE).wrapping_add(offset);
        if o >= self.reserved {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `prefetcht0` (SSE, part of x86-64) only hints the cache; it reads nothing
        // architecturally and never faults, and the address lies inside the reservation.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.base.add(o).cast::<i8>());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = o;
    }

    /// Page `id` for writing.
    ///
    /// # Safety
    /// No other reference to this page may be alive: the page is fresh or free (reachable from
    /// no root a reader holds), and the single writer holds no other slice of it.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn page_mut(&self, id: u32) -> &mut [u8] {
        let o = id as usize * PAGE;
        assert!(
            o + PAGE <= self.reserved,
            "page {id} beyond the reservation"
        );
        // SAFETY: inside the reservation; exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(o), PAGE) }
    }

    /// Writes pages `[from, to)` to the file and waits (no-op in memory).
    pub(crate) fn flush(&self, from: u32, to: u32) -> io::Result<()> {
        if self.file.is_none() || to <= from {
            return Ok(());
        }
        let (o, len) = (from as usize * PAGE, (to - from) as usize * PAGE);
        assert!(o + len <= self.reserved);
        // SAFETY: a page-aligned range inside the mapping.
        let r = unsafe { libc::msync(self.base.add(o).cast(), len, libc::MS_SYNC) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the mapping made in the constructor; every slice of it borrowed `self`.
        unsafe {
            libc::munmap(self.base.cast(), self.reserved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` line of the mapping that holds `base`, from `/proc/self/smaps` (the kernel
    /// may merge a mapping with a neighbour of the same flags, such as another test's store).
    fn vm_flags(base: *mut u8) -> String {
        smaps_line(base, "VmFlags:")
    }

    /// The first line starting with `field` in the `/proc/self/smaps` entry of the mapping
    /// that holds `base`.
    fn smaps_line(base: *mut u8, field: &str) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let at = base as usize;
        let holds = |l: &str| {
            let range = l.split_whitespace().next().unwrap_or("");
            let Some((lo, hi)) = range.split_once('-') else {
                return false;
            };
            match (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                (Ok(lo), Ok(hi)) => lo <= at && at < hi,
                _ => false,
            }
        };
        let mut lines = smaps.lines().skip_while(|l| !holds(l));
        assert!(lines.next().is_some(), "no mapping holds {at:#x}");
        lines
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} line"))
            .to_string()
    }

    /// Resident kB of the mapping that holds `base`.
    fn rss_kb(base: *mut u8) -> usize {
        let line = smaps_line(base, "Rss:");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn a_prefaulted_reservation_is_resident_before_it_is_written() {
        let mem = Pages::anonymous(64 << 20, 24 << 20).unwrap();
        // The 24 MiB asked for, and no more than the reservation (a neighbouring mapping the
        // kernel merged with it could add its own resident pages; the reservation's are all
        // it has touched).
        let rss = rss_kb(mem.base);
        assert!(rss >= 24 << 10, "Rss {rss} kB");
        assert!(
            mem.page(0).iter().all(|&b| b == 0),
            "prefaulted pages read as zeros"
        );
        assert!(mem.page(6143).iter().all(|&b| b == 0));
        assert_eq!(mem.prefault(0).unwrap(), 0);
        // Clamped to the reservation.
        assert_eq!(mem.prefault(1 << 40).unwrap(), 64 << 20);
        drop(mem);
        let lazy = Pages::anonymous(64 << 20, 0).unwrap();
        let rss = rss_kb(lazy.base);
        assert!(rss < 24 << 10, "Rss {rss} kB with nothing written");
    }

    #[test]
    fn file_maps_read_no_ahead_and_memory_asks_for_huge_pages() {
        let dir = std::env::temp_dir().join(format!("pk-mapping-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("pages"))
            .unwrap();
        file.set_len(16 * PAGE as u64).unwrap();
        let pages = Pages::file(file, 1 << 30).unwrap();
        // `rr`: MADV_RANDOM (one-page folios, see `Pages::file`).
        let flags = vm_flags(pages.base);
        assert!(flags.split_whitespace().any(|f| f == "rr"), "{flags}");
        drop(pages);
        std::fs::remove_dir_all(&dir).unwrap();
        let mem = Pages::anonymous(64 << 20, 0).unwrap();
        let flags = vm_flags(mem.base);
        // `hg`: MADV_HUGEPAGE; only where the kernel has transparent huge pages.
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
        } else {
            eprintln!("skipped the huge-page half: the kernel has no transparent huge pages");
        }
    }
}
