//! Serde mirrors of the breadcrumb reader's types (`Record`, `InFlight`, `Args`, `RingHeader`), used until the
//! breadcrumb crate exports them. Field names follow docs/interfaces: the JSON is the same either way.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Args {
    pub bytes: u64,
    pub ptr: u64,
    pub ptr2: u64,
    pub stream: u64,
    pub chunk: u32,
    pub chunk_count: u32,
    pub tensor_first: u32,
    pub tensor_count: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RecordKind {
    #[default]
    Enter,
    Exit,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Record {
    pub seq: u64,
    pub tid: i32,
    pub kind: RecordKind,
    pub call_id: u16,
    pub call: String,
    pub args: Args,
    pub label: String,
    pub result: Option<i64>,
    pub monotonic_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct InFlight {
    pub tid: i32,
    pub call_id: u16,
    pub call: String,
    pub args: Args,
    pub label: String,
    pub entered_monotonic_ns: u64,
    pub age_ns: Option<u64>,
}

pub type RingHeader = serde_json::Value;
