//! What gets uploaded: [`TensorSource`] (any set of host tensors) and [`Workload`], the
//! synthetic stand-in for the wedged job's upload (213,304 samples of shape `[1,193]` f32 plus
//! 50 parameters of 256×1024 f32).

use serde::Serialize;

use crate::plan::TensorInfo;

/// Host tensors to upload. `Sync`: packing threads read tensors concurrently.
pub trait TensorSource: Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// What the planner needs to know about tensor `index`.
    fn info(&self, index: usize) -> TensorInfo;
    /// The host bytes of tensor `index` (`elements × 4` for an eligible f32 tensor).
    fn bytes(&self, index: usize) -> &[u8];
}

/// The views of f32 data as bytes.
pub fn f32_bytes(data: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and every bit pattern is a valid u8; the length in bytes is
    // exactly size_of_val(data) and the lifetime is the input's.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// Shape of a synthetic workload: `samples` tensors of `sample_floats` f32, then `params`
/// tensors of `param_floats` f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkloadSpec {
    pub samples: usize,
    pub sample_floats: usize,
    pub params: usize,
    pub param_floats: usize,
    pub seed: u64,
}

impl Default for WorkloadSpec {
    /// The wedged job's upload.
    fn default() -> Self {
        WorkloadSpec {
            samples: 213_304,
            sample_floats: 193,
            params: 50,
            param_floats: 256 * 1024,
            seed: 0x5eed_2026,
        }
    }
}

impl WorkloadSpec {
    pub fn tensors(&self) -> usize {
        self.samples + self.params
    }

    pub fn bytes(&self) -> u64 {
        (self.samples as u64 * self.sample_floats as u64
            + self.params as u64 * self.param_floats as u64)
            * 4
    }
}

/// Host tensors owned in memory, each its own allocation (as a real model's are).
#[derive(Debug, Default)]
pub struct Workload {
    infos: Vec<TensorInfo>,
    data: Vec<Vec<f32>>,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Deterministic, never-zero values (zeros would hide unwritten device memory).
fn fill(tensor: u64, seed: u64, out: &mut [f32]) {
    let mut state = splitmix(seed ^ tensor.wrapping_mul(0x2545_f491_4f6c_dd1d));
    for v in out.iter_mut() {
        state = splitmix(state);
        // 23 random mantissa bits in [1, 2), sign random: never 0, never NaN.
        let bits =
            0x3f80_0000 | ((state >> 41) as u32 & 0x007f_ffff) | (((state >> 63) as u32) << 31);
        *v = f32::from_bits(bits);
    }
}

impl Workload {
    /// Generates `spec`'s tensors on all cores.
    pub fn synthetic(spec: &WorkloadSpec) -> Workload {
        let n = spec.tensors();
        let floats = |i: usize| {
            if i < spec.samples {
                spec.sample_floats
            } else {
                spec.param_floats
            }
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |p| p.get())
            .clamp(1, 16);
        let per = n.div_ceil(threads).max(1);
        let mut data: Vec<Vec<f32>> = Vec::with_capacity(n);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .step_by(per)
                .map(|start| {
                    let end = (start + per).min(n);
                    scope.spawn(move || {
                        (start..end)
                            .map(|i| {
                                let mut v = vec![0f32; floats(i)];
                                fill(i as u64, spec.seed, &mut v);
                                v
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                // A generator thread cannot panic short of allocation failure, which aborts.
                data.extend(h.join().unwrap_or_default());
            }
        });
        let infos = data
            .iter()
            .map(|v| TensorInfo::f32(v.len() as u64))
            .collect();
        Workload { infos, data }
    }

    /// A workload from explicit tensors (infos may mark tensors ineligible).
    pub fn from_parts(infos: Vec<TensorInfo>, data: Vec<Vec<f32>>) -> Workload {
        assert_eq!(infos.len(), data.len(), "one info per tensor");
        Workload { infos, data }
    }

    pub fn infos(&self) -> &[TensorInfo] {
        &self.infos
    }

    /// Bytes of host data over all tensors.
    pub fn total_bytes(&self) -> u64 {
        self.data.iter().map(|v| v.len() as u64 * 4).sum()
    }
}

impl TensorSource for Workload {
    fn len(&self) -> usize {
        self.infos.len()
    }

    fn info(&self, index: usize) -> TensorInfo {
        self.infos[index]
    }

    fn bytes(&self, index: usize) -> &[u8] {
        f32_bytes(&self.data[index])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_is_deterministic_and_never_zero() {
        let spec = WorkloadSpec {
            samples: 70,
            sample_floats: 193,
            params: 3,
            param_floats: 1000,
            seed: 7,
        };
        let a = Workload::synthetic(&spec);
        let b = Workload::synthetic(&spec);
        assert_eq!(a.len(), 73);
        assert_eq!(a.total_bytes(), spec.bytes());
        assert_eq!(a.bytes(5), b.bytes(5));
        assert_ne!(a.bytes(5), a.bytes(6));
        assert!(a.data.iter().flatten().all(|v| *v != 0.0 && v.is_finite()));
        assert_eq!(a.info(72).elements, 1000);
    }
}
