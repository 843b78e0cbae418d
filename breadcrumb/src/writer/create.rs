//! Making a writer: a fresh ring built under a temporary name and renamed into place
//! ([`Writer::create`]), an existing ring opened to append ([`Writer::open`]), or a ring configured
//! by the environment ([`Writer::from_env`]); the header a fresh ring starts with.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    map_shared, register_fork_handler, ring_file_name, Mapping, TimeSource, Writer, WriterOptions,
    ENV_RING, ENV_RING_CLOCK, ENV_RING_DIR, ENV_RING_LANES, ENV_RING_SLOTS, NEXT_WRITER_ID,
};
use crate::counter::{self, Counter};
use crate::error::{Error, Result};
use crate::format::{self, header, RingClock};
use crate::identity::{self, ProcessIdentity};

impl Writer {
    /// Creates a fresh ring of `slot_count` slots (a power of two, 1..=2^20) at `path`, replacing
    /// any file there atomically (built under a temporary name, then renamed), and maps it.
    pub fn create(path: impl AsRef<Path>, slot_count: u32) -> Result<Writer> {
        let options = WriterOptions {
            slot_count,
            ..WriterOptions::default()
        };
        Self::create_with(path.as_ref(), &options, &ProcessIdentity::current())
    }

    /// [`Writer::create`] with explicit options and identity for the header.
    pub fn create_with(
        path: &Path,
        options: &WriterOptions,
        identity: &ProcessIdentity,
    ) -> Result<Writer> {
        let lane_count = options.lanes()?;
        register_fork_handler();
        let total = format::ring_len(options.slot_count, lane_count);
        // Never more than the agent reads (true of every slot and lane count `lanes` accepts).
        if total > format::MAX_RING_BYTES {
            return Err(Error::RingTooLarge {
                slots: u64::from(options.slot_count),
                max_slots: format::MAX_SLOT_COUNT,
                max_bytes: format::MAX_RING_BYTES,
            });
        }
        let map_len = usize::try_from(total).map_err(|_| Error::Create("ring too large".into()))?;

        let file_name = path
            .file_name()
            .ok_or_else(|| Error::Create(format!("{}: not a file path", path.display())))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(file_name);
        temp_name.push(format!(".tmp-{}", std::process::id()));
        let temp = path.with_file_name(temp_name);
        let _ = std::fs::remove_file(&temp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
            .map_err(|e| Error::io(&temp, "create", e))?;
        let result =
            Self::init_and_publish(file, &temp, path, map_len, lane_count, options, identity);
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result
    }

    fn init_and_publish(
        file: File,
        temp: &Path,
        path: &Path,
        map_len: usize,
        lane_count: u32,
        options: &WriterOptions,
        identity: &ProcessIdentity,
    ) -> Result<Writer> {
        file.set_len(map_len as u64)
            .map_err(|e| Error::io(temp, "size", e))?;
        // The counter only where it is usable and measured no dearer than the vDSO clock
        // (docs/breadcrumb-ring.md, "Which clock"); the header's counter_kind and clock_id say
        // which was chosen, so readers convert accordingly.
        let (counter, read_costs) = match options.clock {
            RingClock::Counter => counter::choose(),
            RingClock::Monotonic | RingClock::MonotonicCoarse => (None, None),
        };
        let time = match (counter, options.clock) {
            (Some(counter), _) => TimeSource::Counter { hz: counter.hz },
            (None, RingClock::MonotonicCoarse) => TimeSource::Clock(libc::CLOCK_MONOTONIC_COARSE),
            (None, _) => TimeSource::Clock(libc::CLOCK_MONOTONIC),
        };
        let mut writer = Writer::from_mapping(
            map_shared(file, map_len, temp)?,
            path,
            lane_count,
            options.slot_count,
            time,
        );
        writer.read_costs = read_costs;
        writer.write_header(options, lane_count, counter.as_ref(), identity);
        std::fs::rename(temp, path).map_err(|e| Error::io(path, "rename into place", e))?;
        Ok(writer)
    }

    fn from_mapping(
        mapping: Mapping,
        path: &Path,
        lane_count: u32,
        slot_count: u32,
        time: TimeSource,
    ) -> Writer {
        let lane_slots = slot_count / lane_count;
        Writer {
            base: mapping.base,
            id: NEXT_WRITER_ID.fetch_add(1, Ordering::Relaxed),
            lane_count,
            lane_slots_mask: u64::from(lane_slots) - 1,
            lane_slots_shift: lane_slots.trailing_zeros(),
            slots_offset: format::HEADER_SIZE as usize
                + format::LANE_ENTRY_SIZE as usize * lane_count as usize,
            time,
            read_costs: None,
            path: path.to_path_buf(),
            status_lock: Mutex::new(()),
            mapping: Arc::new(mapping),
        }
    }

    /// Opens an existing ring (made by another process, e.g. a launcher) to append to it. Lanes
    /// and the shared lane's claim protocol work across processes sharing the file; the header
    /// keeps its creator's identity. The file must be a valid version-2 ring with the default
    /// header and slot sizes, stamped with a clock this process can read the same way.
    pub fn open(path: impl AsRef<Path>) -> Result<Writer> {
        let path = path.as_ref();
        register_fork_handler();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| Error::io(path, "open", e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
        if !meta.file_type().is_file() {
            return Err(Error::NotRegular { path: path.into() });
        }
        let header_len = meta.len().min(u64::from(format::HEADER_SIZE)) as usize;
        let mut head_bytes = vec![0u8; header_len];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut head_bytes, 0)
            .map_err(|e| Error::io(path, "read", e))?;
        let header = crate::reader::header_parse::parse_header_with_len(&head_bytes, meta.len())?;
        let refuse = |why: String| Err(Error::Create(format!("{}: {why}", path.display())));
        if header.version != format::VERSION {
            return refuse(format!(
                "a version {} ring; this writer appends to version {} rings only",
                header.version,
                format::VERSION
            ));
        }
        if header.header_size != format::HEADER_SIZE || header.slot_size != format::SLOT_SIZE {
            return refuse(format!(
                "header size {} / slot size {} differ from this writer's {} / {}",
                header.header_size,
                header.slot_size,
                format::HEADER_SIZE,
                format::SLOT_SIZE
            ));
        }
        let time = match header.counter_kind {
            counter::COUNTER_NONE => match format::RingClock::from_id(header.clock_id) {
                Some(RingClock::MonotonicCoarse) => TimeSource::Clock(libc::CLOCK_MONOTONIC_COARSE),
                _ => TimeSource::Clock(libc::CLOCK_MONOTONIC),
            },
            kind => match counter::detect() {
                Some(mine) if mine.kind == kind => TimeSource::Counter {
                    hz: header.counter_hz,
                },
                _ => return refuse("stamped with a CPU counter this process cannot use".into()),
            },
        };
        let map_len = header.needed_len() as usize;
        let mapping = map_shared(file, map_len, path)?;
        Ok(Writer::from_mapping(
            mapping,
            path,
            header.lane_count,
            header.slot_count,
            time,
        ))
    }

    /// A ring configured by the environment: `WEDGE_CAPTURE_RING` (a path) wins over
    /// `WEDGE_CAPTURE_RING_DIR` (a directory; file `<pid>-<starttime>.ring`); `Ok(None)` when
    /// neither is set. `WEDGE_CAPTURE_RING_SLOTS` overrides the slot count,
    /// `WEDGE_CAPTURE_RING_LANES` the lane count, and `WEDGE_CAPTURE_RING_CLOCK` the clock
    /// (`counter`, the default; `monotonic`; `coarse`).
    pub fn from_env() -> Result<Option<Writer>> {
        let number = |name: &str, default: u32| match std::env::var(name) {
            Ok(text) => text
                .trim()
                .parse::<u32>()
                .map_err(|_| Error::Create(format!("{name}={text:?} is not a number"))),
            Err(_) => Ok(default),
        };
        let slots = number(ENV_RING_SLOTS, format::DEFAULT_SLOT_COUNT)?;
        let lanes = number(ENV_RING_LANES, 0)?;
        let clock = match std::env::var(ENV_RING_CLOCK).as_deref() {
            Ok("counter") | Ok("") | Err(_) => RingClock::Counter,
            Ok("monotonic") => RingClock::Monotonic,
            Ok("coarse") => RingClock::MonotonicCoarse,
            Ok(other) => {
                return Err(Error::Create(format!(
                    "{ENV_RING_CLOCK}={other:?}: expected \"counter\", \"monotonic\" or \"coarse\""
                )))
            }
        };
        let options = WriterOptions {
            slot_count: slots,
            clock,
            lane_count: lanes,
        };
        let identity = ProcessIdentity::current();
        if let Some(path) = std::env::var_os(ENV_RING).filter(|p| !p.is_empty()) {
            return Writer::create_with(Path::new(&path), &options, &identity).map(Some);
        }
        if let Some(dir) = std::env::var_os(ENV_RING_DIR).filter(|p| !p.is_empty()) {
            let path =
                PathBuf::from(dir).join(ring_file_name(identity.pid, identity.start_time_ticks));
            return Writer::create_with(&path, &options, &identity).map(Some);
        }
        Ok(None)
    }

    fn write_header(
        &self,
        options: &WriterOptions,
        lane_count: u32,
        counter: Option<&Counter>,
        identity: &ProcessIdentity,
    ) {
        let put64 = |at: usize, v: u64| self.word(at).store(v.to_le(), Ordering::Relaxed);
        let put32 = |at: usize, v: u32| self.u32_word(at).store(v.to_le(), Ordering::Relaxed);
        put64(header::MAGIC, u64::from_le_bytes(format::MAGIC));
        put32(header::VERSION, format::VERSION);
        put32(header::HEADER_SIZE, format::HEADER_SIZE);
        put32(header::SLOT_SIZE, format::SLOT_SIZE);
        put32(header::SLOT_COUNT, options.slot_count);
        put32(header::WRITER_PID, identity.pid);
        put32(header::CLOCK_ID, options.clock.id());
        put64(header::PIDNS_INODE, identity.pidns_inode);
        put64(header::START_TIME_TICKS, identity.start_time_ticks);
        let mut boot = [0u8; 8];
        boot.copy_from_slice(&identity.boot_id[..8]);
        put64(header::BOOT_ID, u64::from_le_bytes(boot));
        boot.copy_from_slice(&identity.boot_id[8..]);
        put64(header::BOOT_ID + 8, u64::from_le_bytes(boot));
        put32(header::TICKS_PER_SECOND, identity.ticks_per_second);
        put32(header::FLAGS, 0);
        put32(header::LANE_COUNT, lane_count);
        match counter {
            Some(counter) => {
                put32(header::COUNTER_KIND, counter.kind);
                put64(header::COUNTER_HZ, counter.hz);
                put64(header::CREATED_COUNTER, counter.counter_at);
                put64(header::CREATED_MONOTONIC_NS, counter.monotonic_ns);
                put64(header::CALIB_COUNTER, counter.counter_at);
                put64(header::CALIB_MONOTONIC_NS, counter.monotonic_ns);
                put64(header::CALIB_SEQ, 2);
            }
            None => {
                let clock = match self.time {
                    TimeSource::Clock(clock) => clock,
                    TimeSource::Counter { .. } => libc::CLOCK_MONOTONIC,
                };
                put32(header::COUNTER_KIND, counter::COUNTER_NONE);
                put64(header::CREATED_MONOTONIC_NS, identity::clock_ns(clock));
            }
        }
        put64(header::CREATED_REALTIME_NS, identity::realtime_ns());
        fence(Ordering::Release);
    }
}
