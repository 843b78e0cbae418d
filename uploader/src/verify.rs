//! `--verify`: read every uploaded tensor back from the device and compare it byte for byte.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::outcome::{Uploaded, View};
use crate::trace::{sat_u32, Site, Traced};
use crate::workload::TensorSource;

/// Read-backs are grouped into spans of at most this many bytes (a lone bigger tensor is one span).
const SPAN_BYTES: u64 = 64 << 20;

/// What was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub tensors: usize,
    pub bytes: u64,
    /// Device-to-host copies made.
    pub reads: usize,
}

/// Groups consecutive views of one allocation, ascending and non-overlapping, into spans.
fn spans(views: &[View]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=views.len() {
        let split = i == views.len() || {
            let first = &views[start];
            let prev = &views[i - 1];
            let v = &views[i];
            v.allocation != first.allocation
                || v.device_ptr < prev.device_ptr + prev.bytes
                || v.device_ptr + v.bytes - first.device_ptr > SPAN_BYTES
        };
        if split {
            if start < i {
                out.push(start..i);
            }
            start = i;
        }
    }
    out
}

/// Reads back every view of `uploaded` and compares it with `src`.
pub fn verify(t: &Traced, uploaded: &Uploaded, src: &dyn TensorSource) -> Result<VerifyReport> {
    let groups = spans(&uploaded.views);
    let mut buf: Vec<u8> = Vec::new();
    let mut bytes = 0;
    for (g, range) in groups.iter().enumerate() {
        let views = &uploaded.views[range.clone()];
        let first = &views[0];
        let last = &views[views.len() - 1];
        let base = first.device_ptr;
        let len = (last.device_ptr + last.bytes - base) as usize;
        buf.clear();
        buf.resize(len, 0);
        let site = Site {
            unit: "verify",
            index: g as u32,
            count: sat_u32(groups.len()),
            chunk: first.chunk,
            chunk_count: sat_u32(uploaded.chunks),
            tensor_first: sat_u32(first.tensor),
            tensor_count: sat_u32(last.tensor + 1 - first.tensor),
        };
        // SAFETY: the span lies inside allocation `first.allocation` (views are built inside
        // their allocation and grouped per allocation), which is live until `uploaded` is freed.
        unsafe { t.memcpy_dtoh(&site, &mut buf, base) }?;
        for v in views {
            let at = (v.device_ptr - base) as usize;
            let got = &buf[at..at + v.bytes as usize];
            let want = src.bytes(v.tensor);
            if got != want {
                let offset = got
                    .iter()
                    .zip(want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(want.len()));
                return Err(Error::VerifyMismatch {
                    tensor: v.tensor,
                    offset: offset as u64,
                    bytes: v.bytes,
                });
            }
            bytes += v.bytes;
        }
    }
    Ok(VerifyReport {
        tensors: uploaded.views.len(),
        bytes,
        reads: groups.len(),
    })
}
