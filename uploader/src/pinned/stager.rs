//! The staging ring's lifetime: creating and destroying a [`PinnedStager`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::options::{PinnedOptions, StagingMemory};
use super::staging::{
    map_huge_aligned, prefault, registration_groups, unregister_group, FaultPass, Registration,
    Staging, HUGE_PAGE,
};
use crate::driver::{DeviceAttribute, Event, Stream};
use crate::error::{chunk_failed, Error, Result};
use crate::outcome::elapsed_ns;
use crate::trace::{Site, Traced};

/// Pinned staging buffers, their events and the copy stream. Create once and reuse across
/// uploads to keep page-locking out of the hot path; [`crate::strategy::upload`] makes a
/// fresh one per call.
#[derive(Debug)]
pub struct PinnedStager {
    pub(super) options: PinnedOptions,
    pub(super) staging: Option<Staging>,
    pub(super) events: Vec<Event>,
    pub(super) stream: Option<Stream>,
    /// Time `create` took (reported in the first upload's stats by `upload`).
    created_ns: u64,
    /// Of that, `cuMemHostRegister` (`Register` staging).
    created_register_ns: u64,
    /// Made for one upload ([`PinnedStager::create_one_shot`]).
    pub(super) one_shot: bool,
}

impl PinnedStager {
    /// Allocates the staging memory, one event per buffer and the copy stream.
    pub fn create(t: &Traced, options: &PinnedOptions) -> Result<PinnedStager> {
        options.validate()?;
        let started = Instant::now();
        let mut stager = PinnedStager {
            options: *options,
            staging: None,
            events: Vec::new(),
            stream: None,
            created_ns: 0,
            created_register_ns: 0,
            one_shot: false,
        };
        match stager.set_up(t) {
            Ok(()) => {
                stager.created_ns = elapsed_ns(started);
                Ok(stager)
            }
            Err(e) => {
                let _ = stager.destroy(t);
                Err(e)
            }
        }
    }

    /// Makes the copy stream, the staging memory and the events. On failure whatever was made
    /// is left in `self`, for `destroy` to free.
    fn set_up(&mut self, t: &Traced) -> Result<()> {
        let options = self.options;
        let site = Site::plain("pinned setup");
        self.stream = Some(t.stream_create(&site)?);
        // A device that cannot say (an older driver) cannot take the flag either.
        let read_only = options.read_only_staging
            && options.staging != StagingMemory::HostAlloc
            && t.device_attribute(&site, DeviceAttribute::ReadOnlyHostRegisterSupported)
                .is_ok_and(|supported| supported != 0);
        let stride = usize::try_from(options.buffer_bytes)
            .ok()
            .and_then(|b| b.checked_next_multiple_of(4096))
            .ok_or_else(|| Error::InvalidOptions("staging buffer too large".into()))?;
        let total = stride
            .checked_mul(options.buffers)
            .ok_or_else(|| Error::InvalidOptions("staging memory too large".into()))?;
        let staging = match options.staging {
            StagingMemory::HostAlloc => Staging {
                base: t.host_alloc_pinned(&site, total as u64)?,
                len: total,
                stride,
                memory: StagingMemory::HostAlloc,
                groups: locked_at_once(options.buffers),
                faults: None,
                read_only: false,
            },
            StagingMemory::Overlap => overlap_staging(total, stride, options.buffers, read_only)?,
            StagingMemory::Register => {
                self.registered_staging(t, &site, total, stride, read_only)?
            }
        };
        self.staging = Some(staging);
        for _ in 0..options.buffers {
            self.events.push(t.event_create(&site)?);
        }
        Ok(())
    }

    /// `Register` staging of `total` bytes: mapped, faulted in and page-locked at once (the
    /// time locking took goes to `created_register_ns`).
    fn registered_staging(
        &mut self,
        t: &Traced,
        site: &Site,
        total: usize,
        stride: usize,
        read_only: bool,
    ) -> Result<Staging> {
        let len = total.next_multiple_of(HUGE_PAGE);
        let base = map_huge_aligned(len)?;
        prefault(base, len, self.options.threads);
        let registering = Instant::now();
        // SAFETY: our own fresh mapping of `len` bytes, page-aligned, unmapped only after
        // unregistering (destroy); registered read-only only if nothing on the device writes it
        // (staging is only ever a copy's source), and `prefault` wrote every page, so the pin
        // holds the pages the packers write.
        let registered_now = unsafe { t.host_register(site, base, len as u64, read_only) };
        self.created_register_ns = elapsed_ns(registering);
        if let Err(e) = registered_now {
            // SAFETY: our mapping, never registered, nothing refers to it.
            unsafe { libc::munmap(base.cast(), len) };
            return Err(e);
        }
        Ok(Staging {
            base,
            len,
            stride,
            memory: StagingMemory::Register,
            groups: locked_at_once(self.options.buffers),
            faults: None,
            read_only,
        })
    }

    /// Frees staging memory, events and stream (after waiting for the stream).
    pub fn destroy(self, t: &Traced) -> Result<()> {
        let site = Site::plain("pinned teardown");
        let mut first_err: Option<Error> = None;
        if let Some(stream) = self.stream {
            // SAFETY: our live stream; synchronized before anything it uses is freed.
            if let Err(e) = unsafe { t.stream_synchronize(&site, stream) } {
                first_err.get_or_insert(e);
            }
        }
        for &e in &self.events {
            // SAFETY: our live events, destroyed once.
            if let Err(err) = unsafe { t.event_destroy(&site, e) } {
                first_err.get_or_insert(err);
            }
        }
        if let Some(s) = &self.staging {
            match s.memory {
                StagingMemory::HostAlloc => {
                    // SAFETY: our pinned allocation, freed once, no copy in flight (stream
                    // synchronized above).
                    if let Err(err) = unsafe { t.host_free_pinned(&site, s.base, s.len as u64) } {
                        first_err.get_or_insert(err);
                    }
                }
                StagingMemory::Overlap => {
                    let mut all_unregistered = true;
                    for g in 0..s.groups.len() {
                        // SAFETY: the stream was synchronized above: no copy in flight.
                        if let Err(err) = unsafe { unregister_group(t, &site, s, g) } {
                            all_unregistered = false;
                            first_err.get_or_insert(err);
                        }
                    }
                    if all_unregistered {
                        // SAFETY: our mapping, no part of it registered any more; nothing
                        // refers to it. (Otherwise it leaks, as for `Register` below.)
                        unsafe { libc::munmap(s.base.cast(), s.len) };
                    }
                }
                StagingMemory::Register => {
                    // SAFETY: registered once in `create`, no copy in flight.
                    let unregistered = unsafe { t.host_unregister(&site, s.base, s.len as u64) };
                    match unregistered {
                        // SAFETY: our mapping, no longer registered; nothing refers to it.
                        Ok(()) => unsafe {
                            libc::munmap(s.base.cast(), s.len);
                        },
                        // Still registered as far as we know: leak the mapping rather than
                        // unmap memory the driver may still have pinned.
                        Err(err) => {
                            first_err.get_or_insert(err);
                        }
                    }
                }
            }
        }
        if let Some(stream) = self.stream {
            // SAFETY: our live stream, destroyed once.
            if let Err(e) = unsafe { t.stream_destroy(&site, stream) } {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Nanoseconds `create` took.
    pub fn created_ns(&self) -> u64 {
        self.created_ns
    }

    /// Nanoseconds of `create` spent in `cuMemHostRegister`.
    pub fn created_register_ns(&self) -> u64 {
        self.created_register_ns
    }

    /// A stager for one upload only ([`crate::strategy::upload`]): with `Overlap` staging, that
    /// upload unlocks each group of buffers as soon as it holds no more of its slices, while
    /// it waits for packers or the last copies, instead of in teardown.
    pub(crate) fn create_one_shot(t: &Traced, options: &PinnedOptions) -> Result<PinnedStager> {
        let mut stager = PinnedStager::create(t, options)?;
        stager.one_shot = true;
        Ok(stager)
    }

    /// One-shot `Overlap` stager: unlocks every locked group whose buffers hold no more slices
    /// of the upload (each buffer's last slice is below `released`, so its copy finished).
    /// Returns the nanoseconds it took.
    pub(super) fn retire(
        &self,
        t: &Traced,
        staging: &Staging,
        released: u64,
        slices: u64,
    ) -> Result<u64> {
        if staging.memory != StagingMemory::Overlap {
            return Ok(0);
        }
        let buffers = self.options.buffers as u64;
        let last_slice_of = |b: u64| b + (slices - 1 - b) / buffers * buffers;
        let mut spent = 0;
        for (g, group) in staging.groups.iter().enumerate() {
            let finished = group.buffers.clone().all(|b| {
                let b = b as u64;
                b >= slices || last_slice_of(b) < released
            });
            if !finished || !group.registered.load(Ordering::Acquire) {
                continue;
            }
            let site = Site::plain("pinned retire");
            // SAFETY: every slice of the group's buffers was released, so its copy finished
            // (its event was seen complete), and no later slice uses them: this upload is the
            // stager's only one.
            spent += unsafe { unregister_group(t, &site, staging, g) }
                .map_err(|e| chunk_failed("slice", group.buffers.start, slices as usize, e))?;
        }
        Ok(spent)
    }
}

/// Every buffer in one group, locked at creation (`HostAlloc`, `Register`).
fn locked_at_once(buffers: usize) -> Vec<Registration> {
    vec![Registration {
        buffers: 0..buffers,
        registered: AtomicBool::new(true),
    }]
}

/// `Overlap` staging of `total` bytes: mapped, but neither faulted in nor page-locked yet (the
/// first uploads' packers fault it in, their submitters lock it group by group).
fn overlap_staging(
    total: usize,
    stride: usize,
    buffers: usize,
    read_only: bool,
) -> Result<Staging> {
    let len = total.next_multiple_of(HUGE_PAGE);
    let base = map_huge_aligned(len)?;
    Ok(Staging {
        base,
        len,
        stride,
        memory: StagingMemory::Overlap,
        groups: registration_groups(buffers)
            .into_iter()
            .map(|buffers| Registration {
                buffers,
                registered: AtomicBool::new(false),
            })
            .collect(),
        faults: Some(FaultPass::new(base, len)),
        read_only,
    })
}
