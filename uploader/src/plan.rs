//! The chunk planner: which tensors go into the bulk upload, and where each one lands.
//!
//! It reproduces `bulkUploadF32` of the Go library ztensor (v1.8.1+):
//! - Eligible: f32 tensors with non-empty host data that are not already on the device. Fewer
//!   than [`PlanOptions::min_eligible`] (64) eligible tensors: no bulk upload at all.
//! - Offsets inside a chunk are running sums of element count × 4 bytes, no padding, unless an
//!   alignment is given (then each offset is rounded up to it).
//! - Greedy contiguous chunks, in tensor order: a new chunk starts when the next tensor would
//!   end past the byte cap (default 64 MiB) or the chunk already holds the tensor cap (default
//!   4096). A tensor larger than the byte cap gets a chunk of its own.
//!
//! The planner is pure: no I/O, no driver, so it is property-tested (tests at the bottom).

use serde::Serialize;

use crate::error::{Error, Result};

/// Element types a tensor may have. Only [`DType::F32`] is eligible for the bulk upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    I64,
    U8,
}

impl DType {
    pub fn size(self) -> u64 {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::U8 => 1,
        }
    }
}

/// What the planner needs to know about one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TensorInfo {
    pub dtype: DType,
    /// Element count (product of the shape).
    pub elements: u64,
    /// The tensor has host data (ztensor: a non-nil host slice).
    pub has_host_data: bool,
    /// The tensor already lives on the device.
    pub on_device: bool,
}

impl TensorInfo {
    /// An f32 tensor with host data, not on the device.
    pub fn f32(elements: u64) -> TensorInfo {
        TensorInfo {
            dtype: DType::F32,
            elements,
            has_host_data: true,
            on_device: false,
        }
    }

    /// ztensor's eligibility rule.
    pub fn eligible(&self) -> bool {
        self.dtype == DType::F32 && self.has_host_data && self.elements > 0 && !self.on_device
    }
}

/// Planner settings; the defaults are ztensor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanOptions {
    /// Byte cap per chunk (64 MiB).
    pub chunk_bytes: u64,
    /// Tensor cap per chunk (4096).
    pub chunk_tensors: u32,
    /// Below this many eligible tensors there is no bulk upload (64).
    pub min_eligible: usize,
    /// Round each in-chunk offset up to this many bytes (a power of two); `None`: no padding.
    pub alignment: Option<u64>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            chunk_bytes: 64 << 20,
            chunk_tensors: 4096,
            min_eligible: 64,
            alignment: None,
        }
    }
}

impl PlanOptions {
    pub fn validate(&self) -> Result<()> {
        if self.chunk_bytes == 0 {
            return Err(Error::InvalidOptions("chunk byte cap must be > 0".into()));
        }
        if self.chunk_tensors == 0 {
            return Err(Error::InvalidOptions("chunk tensor cap must be > 0".into()));
        }
        if let Some(a) = self.alignment {
            if a == 0 || !a.is_power_of_two() {
                return Err(Error::InvalidOptions(format!(
                    "alignment must be a power of two, got {a}"
                )));
            }
        }
        Ok(())
    }
}

/// Where one eligible tensor lands: chunk and byte offset inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Index of the tensor in the planner's input.
    pub tensor: usize,
    pub chunk: u32,
    /// Byte offset from the chunk's start.
    pub offset: u64,
    pub bytes: u64,
}

/// One chunk: one device allocation, one staging copy, one host-to-device copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChunkPlan {
    pub index: u32,
    /// First placement (index into [`Plan::placements`]) in this chunk.
    pub first: usize,
    /// Number of tensors in this chunk.
    pub count: usize,
    /// Bytes of the chunk: the end of its last tensor (alignment padding included, none after).
    pub bytes: u64,
}

impl ChunkPlan {
    pub fn placements(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.count
    }
}

/// The whole upload plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub options: PlanOptions,
    pub chunks: Vec<ChunkPlan>,
    /// One per eligible tensor, in input order.
    pub placements: Vec<Placement>,
    /// Sum of the tensors' bytes (padding excluded).
    pub tensor_bytes: u64,
    /// Tensors in the input that were not eligible.
    pub skipped: usize,
}

impl Plan {
    /// Sum of the chunks' sizes (what the device allocations take).
    pub fn chunk_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.bytes).sum()
    }

    pub fn largest_chunk(&self) -> u64 {
        self.chunks.iter().map(|c| c.bytes).max().unwrap_or(0)
    }
}

/// What the planner decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Planned {
    /// Bulk upload with this plan.
    Bulk(Plan),
    /// Fewer than `min_eligible` eligible tensors: ztensor uploads none of them in bulk.
    TooFew {
        eligible: usize,
        min_eligible: usize,
    },
}

fn align_up(value: u64, align: u64) -> Option<u64> {
    // align is a power of two (validated).
    value.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// Plans the bulk upload of `tensors`.
pub fn plan(tensors: &[TensorInfo], options: &PlanOptions) -> Result<Planned> {
    options.validate()?;
    let eligible = tensors.iter().filter(|t| t.eligible()).count();
    if eligible < options.min_eligible {
        return Ok(Planned::TooFew {
            eligible,
            min_eligible: options.min_eligible,
        });
    }
    let align = options.alignment.unwrap_or(1);
    let overflow = || Error::InvalidOptions("tensor sizes overflow 64 bits".into());

    let mut chunks: Vec<ChunkPlan> = Vec::new();
    let mut placements: Vec<Placement> = Vec::with_capacity(eligible);
    let mut tensor_bytes: u64 = 0;
    // The open chunk: its first placement, tensor count and current end.
    let mut first = 0usize;
    let mut count = 0usize;
    let mut end = 0u64;

    for (index, tensor) in tensors.iter().enumerate() {
        if !tensor.eligible() {
            continue;
        }
        let bytes = tensor.elements.checked_mul(4).ok_or_else(overflow)?;
        tensor_bytes = tensor_bytes.checked_add(bytes).ok_or_else(overflow)?;
        let mut offset = align_up(end, align).ok_or_else(overflow)?;
        let would_end = offset.checked_add(bytes).ok_or_else(overflow)?;
        if count > 0 && (would_end > options.chunk_bytes || count >= options.chunk_tensors as usize)
        {
            chunks.push(ChunkPlan {
                index: chunks.len() as u32,
                first,
                count,
                bytes: end,
            });
            first = placements.len();
            count = 0;
            offset = 0;
        }
        placements.push(Placement {
            tensor: index,
            chunk: chunks.len() as u32,
            offset,
            bytes,
        });
        count += 1;
        end = offset + bytes;
        if bytes > options.chunk_bytes {
            // Oversized: alone in its chunk (it was placed first in a fresh chunk above).
            chunks.push(ChunkPlan {
                index: chunks.len() as u32,
                first,
                count,
                bytes: end,
            });
            first = placements.len();
            count = 0;
            end = 0;
        }
    }
    if count > 0 {
        chunks.push(ChunkPlan {
            index: chunks.len() as u32,
            first,
            count,
            bytes: end,
        });
    }
    if chunks.len() > u32::MAX as usize {
        return Err(Error::InvalidOptions("more than 2^32 chunks".into()));
    }
    Ok(Planned::Bulk(Plan {
        options: *options,
        chunks,
        placements,
        tensor_bytes,
        skipped: tensors.len() - eligible,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bulk(tensors: &[TensorInfo], options: &PlanOptions) -> Plan {
        match plan(tensors, options).unwrap() {
            Planned::Bulk(p) => p,
            other => panic!("expected a bulk plan, got {other:?}"),
        }
    }

    #[test]
    fn real_workload_has_53_chunks() {
        let mut tensors = vec![TensorInfo::f32(193); 213_304];
        tensors.extend([TensorInfo::f32(256 * 1024); 50]);
        let p = bulk(&tensors, &PlanOptions::default());
        assert_eq!(p.chunks.len(), 53);
        assert!(p.chunks[..52].iter().all(|c| c.count == 4096));
        assert_eq!(p.chunks[0].bytes, 4096 * 772);
        // The last chunk holds the remaining 312 samples and the 50 parameters.
        assert_eq!(p.chunks[52].count, 312 + 50);
        assert_eq!(p.tensor_bytes, 213_304 * 772 + 50 * 1024 * 1024);
    }

    #[test]
    fn fewer_than_64_eligible_means_no_bulk_upload() {
        let mut tensors = vec![TensorInfo::f32(10); 63];
        tensors.push(TensorInfo {
            on_device: true,
            ..TensorInfo::f32(10)
        });
        tensors.push(TensorInfo {
            dtype: DType::F16,
            ..TensorInfo::f32(10)
        });
        tensors.push(TensorInfo {
            has_host_data: false,
            ..TensorInfo::f32(10)
        });
        tensors.push(TensorInfo::f32(0));
        assert_eq!(
            plan(&tensors, &PlanOptions::default()).unwrap(),
            Planned::TooFew {
                eligible: 63,
                min_eligible: 64
            }
        );
        tensors.push(TensorInfo::f32(1));
        let p = bulk(&tensors, &PlanOptions::default());
        assert_eq!(p.placements.len(), 64);
        assert_eq!(p.skipped, 4);
    }

    #[test]
    fn oversized_tensor_gets_its_own_chunk() {
        let options = PlanOptions {
            chunk_bytes: 100,
            min_eligible: 1,
            ..PlanOptions::default()
        };
        let tensors = [
            TensorInfo::f32(5),   // 20 B
            TensorInfo::f32(100), // 400 B, oversized
            TensorInfo::f32(5),
            TensorInfo::f32(20), // 80 B: 20 + 80 = 100 fits exactly
        ];
        let p = bulk(&tensors, &options);
        let shape: Vec<(usize, u64)> = p.chunks.iter().map(|c| (c.count, c.bytes)).collect();
        assert_eq!(shape, vec![(1, 20), (1, 400), (2, 100)]);
    }

    #[test]
    fn alignment_pads_offsets() {
        let options = PlanOptions {
            alignment: Some(256),
            min_eligible: 1,
            ..PlanOptions::default()
        };
        let p = bulk(&[TensorInfo::f32(193); 3], &options);
        let offsets: Vec<u64> = p.placements.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, vec![0, 1024, 2048]);
        assert_eq!(p.chunks[0].bytes, 2048 + 772);
    }

    #[test]
    fn bad_options_are_errors() {
        let t = [TensorInfo::f32(1); 64];
        for options in [
            PlanOptions {
                chunk_bytes: 0,
                ..PlanOptions::default()
            },
            PlanOptions {
                chunk_tensors: 0,
                ..PlanOptions::default()
            },
            PlanOptions {
                alignment: Some(3),
                ..PlanOptions::default()
            },
        ] {
            assert!(matches!(plan(&t, &options), Err(Error::InvalidOptions(_))));
        }
        let huge = [TensorInfo::f32(u64::MAX / 2); 64];
        assert!(plan(&huge, &PlanOptions::default()).is_err());
    }

    fn arb_tensor() -> impl Strategy<Value = TensorInfo> {
        (
            prop_oneof![
                8 => Just(DType::F32),
                1 => Just(DType::F16),
                1 => Just(DType::I64)
            ],
            prop_oneof![4 => 0u64..300, 1 => 0u64..5_000],
            prop::bool::weighted(0.95),
            prop::bool::weighted(0.05),
        )
            .prop_map(|(dtype, elements, has_host_data, on_device)| TensorInfo {
                dtype,
                elements,
                has_host_data,
                on_device,
            })
    }

    fn arb_options() -> impl Strategy<Value = PlanOptions> {
        (
            1u64..20_000,
            1u32..50,
            0usize..80,
            prop_oneof![Just(None), (0u32..9).prop_map(|s| Some(1u64 << s))],
        )
            .prop_map(|(chunk_bytes, chunk_tensors, min_eligible, alignment)| {
                PlanOptions {
                    chunk_bytes,
                    chunk_tensors,
                    min_eligible,
                    alignment,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn plan_properties(
            tensors in prop::collection::vec(arb_tensor(), 0..400),
            options in arb_options(),
        ) {
            let eligible: Vec<usize> = tensors
                .iter()
                .enumerate()
                .filter(|(_, t)| t.eligible())
                .map(|(i, _)| i)
                .collect();
            let planned = plan(&tensors, &options).unwrap();
            let p = match planned {
                Planned::TooFew { eligible: n, .. } => {
                    prop_assert!(eligible.len() < options.min_eligible);
                    prop_assert_eq!(n, eligible.len());
                    return Ok(());
                }
                Planned::Bulk(p) => p,
            };
            prop_assert!(eligible.len() >= options.min_eligible);

            // Every eligible tensor exactly once, in order.
            let placed: Vec<usize> = p.placements.iter().map(|pl| pl.tensor).collect();
            prop_assert_eq!(&placed, &eligible);
            prop_assert_eq!(p.skipped, tensors.len() - eligible.len());

            // Chunks tile the placements contiguously, in order.
            let mut next = 0usize;
            let align = options.alignment.unwrap_or(1);
            for (ci, chunk) in p.chunks.iter().enumerate() {
                prop_assert_eq!(chunk.index as usize, ci);
                prop_assert_eq!(chunk.first, next);
                prop_assert!(chunk.count >= 1);
                next += chunk.count;

                // Caps respected; only a lone tensor may exceed the byte cap.
                prop_assert!(chunk.count <= options.chunk_tensors as usize);
                if chunk.bytes > options.chunk_bytes {
                    prop_assert_eq!(chunk.count, 1);
                }

                // Offsets inside the chunk, increasing, aligned; running sums without alignment.
                let mut end = 0u64;
                for pl in &p.placements[chunk.placements()] {
                    prop_assert_eq!(pl.chunk as usize, ci);
                    prop_assert_eq!(pl.bytes, tensors[pl.tensor].elements * 4);
                    prop_assert!(pl.offset >= end);
                    prop_assert_eq!(pl.offset % align, 0);
                    if options.alignment.is_none() {
                        prop_assert_eq!(pl.offset, end);
                    }
                    prop_assert!(pl.offset + pl.bytes <= chunk.bytes);
                    end = pl.offset + pl.bytes;
                }
                prop_assert_eq!(end, chunk.bytes);

                // Greedy: the next chunk's first tensor would not have fit in this one.
                if let Some(following) = p.chunks.get(ci + 1) {
                    let nb = p.placements[following.first].bytes;
                    let would_end = end.div_ceil(align) * align + nb;
                    prop_assert!(
                        would_end > options.chunk_bytes
                            || chunk.count >= options.chunk_tensors as usize
                            || chunk.bytes > options.chunk_bytes
                    );
                }
            }
            prop_assert_eq!(next, p.placements.len());
            prop_assert_eq!(
                p.tensor_bytes,
                p.placements.iter().map(|pl| pl.bytes).sum::<u64>()
            );
        }
    }
}
