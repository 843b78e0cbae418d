//! The real libcuda functions: each table entry's address, resolved on first use ([`real`]), and the address map of
//! the libcuda the program loaded ([`libcuda_map`]: which of its exported addresses is which table entry), built
//! once from the first libcuda address seen.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::next_dlsym::real_dlsym;
use super::table::{ABI, COUNT, NAMES};

/// The real function of each table entry (0 until resolved).
static REAL: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];
static LIBCUDA: OnceLock<AddressMap> = OnceLock::new();

/// The loaded libcuda's address map, once a libcuda address was seen.
pub(super) fn libcuda_map() -> Option<&'static AddressMap> {
    LIBCUDA.get()
}

/// Every exported function of one libcuda, by address.
pub(super) struct AddressMap {
    /// (address, table index), sorted by address; addresses shared by unlike symbols are left out.
    pub by_address: Vec<(usize, u16)>,
    pub low: usize,
    pub high: usize,
}

impl AddressMap {
    pub fn lookup(&self, address: usize) -> Option<usize> {
        self.by_address
            .binary_search_by_key(&address, |(a, _)| *a)
            .ok()
            .map(|i| usize::from(self.by_address[i].1))
    }

    pub fn contains(&self, address: usize) -> bool {
        (self.low..=self.high).contains(&address)
    }
}

/// The real function of table entry `index`, resolved on first use: libcuda's (from the library the map was
/// built from), else the next definition after this library (a program linked against libcuda).
#[inline]
pub fn real(index: usize) -> usize {
    let known = REAL[index].load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    resolve(index)
}

#[cold]
fn resolve(index: usize) -> usize {
    let name = NAMES[index];
    // SAFETY: RTLD_NEXT from this library's own code: the definition after this one (libcuda for a program
    // linked against it).
    let found = unsafe { real_dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if found.is_null() {
        clear_dlerror();
        return 0;
    }
    adopt_library_of(found);
    let _ = REAL[index].compare_exchange(0, found as usize, Ordering::AcqRel, Ordering::Acquire);
    REAL[index].load(Ordering::Acquire)
}

/// Clears `dlerror()`: the interposer's own failed lookups must not show in the program's.
pub(super) fn clear_dlerror() {
    // SAFETY: dlerror takes no arguments; the returned text (if any) is dropped.
    unsafe { libc::dlerror() };
}

/// If `address` is in a library named `libcuda.so*`, builds the address map from it (once per process).
pub(super) fn adopt_library_of(address: *mut c_void) {
    if LIBCUDA.get().is_some() {
        return;
    }
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr with a valid out-pointer; the address is only looked up.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dladdr filled dli_fname with the object's NUL-terminated path.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    let is_libcuda = path
        .to_bytes()
        .rsplit(|b| *b == b'/')
        .next()
        .is_some_and(|file| file.starts_with(b"libcuda.so"));
    if !is_libcuda {
        return;
    }
    // SAFETY: RTLD_NOLOAD only returns a handle to the already loaded object (never loads or runs anything).
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        clear_dlerror();
        return;
    }
    LIBCUDA.get_or_init(|| build_map(handle));
    // The lookups of symbols this driver lacks left an error behind: the program's dlerror() must not see it.
    clear_dlerror();
}

fn build_map(handle: *mut c_void) -> AddressMap {
    let mut pairs: Vec<(usize, u16)> = Vec::with_capacity(COUNT);
    for (index, name) in NAMES.iter().enumerate() {
        // SAFETY: a live handle (never closed) and a NUL-terminated name.
        let found = unsafe { real_dlsym(handle, name.as_ptr()) };
        if !found.is_null() {
            let _ = REAL[index].compare_exchange(
                0,
                found as usize,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            pairs.push((found as usize, index as u16));
        }
    }
    pairs.sort_unstable();
    let low = pairs.first().map_or(0, |p| p.0);
    let high = pairs.last().map_or(0, |p| p.0);
    // One address, several symbols: keep it only if they all take the same parameters.
    let mut by_address: Vec<(usize, u16)> = Vec::with_capacity(pairs.len());
    let mut i = 0;
    while i < pairs.len() {
        let mut j = i + 1;
        while j < pairs.len() && pairs[j].0 == pairs[i].0 {
            j += 1;
        }
        let abi = ABI[usize::from(pairs[i].1)];
        if pairs[i..j].iter().all(|p| ABI[usize::from(p.1)] == abi) {
            by_address.push(pairs[i]);
        }
        i = j;
    }
    AddressMap {
        by_address,
        low,
        high,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_shared_by_unlike_symbols_is_not_wrapped() {
        let alloc = super::super::table::index_of(b"cuMemAlloc_v2").unwrap() as u16;
        let sync = super::super::table::index_of(b"cuCtxSynchronize").unwrap() as u16;
        let sync2 = super::super::table::index_of(b"cuCtxSynchronize_v2").unwrap() as u16;
        let map = AddressMap {
            by_address: vec![(0x1000, alloc)],
            low: 0x1000,
            high: 0x3000,
        };
        assert_eq!(map.lookup(0x1000), Some(usize::from(alloc)));
        assert!(map.contains(0x2000) && !map.contains(0x4000));
        // What build_map keeps of one address with unlike parameter lists: nothing.
        assert_ne!(ABI[usize::from(sync)], ABI[usize::from(sync2)]);
    }
}
