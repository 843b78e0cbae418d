//! The one integration test binary (ripgrep style): each module tests one area through the built
//! `wedge-capture` binary (`env!("CARGO_BIN_EXE_wedge-capture")`).

mod agent;
mod bundle;
mod busy_scan;
mod capture;
mod continuity;
mod deploy;
mod episode;
mod fleet;
mod gpu_recordings;
mod harness;
mod hostile_capture;
mod hostile_daemon;
mod hostile_rings;
mod hostile_store;
mod hostile_tenant_bounds;
mod hostile_tenant_files;
mod hostile_tenant_pipeline;
mod hostile_tenant_wide;
mod inject;
mod inject_recordings;
mod liveness;
mod log_storm;
mod nvidia_decode;
mod python_frames;
mod quiet_scan;
mod redaction;
mod report;
mod ring;
mod ring_dir;
mod run;
mod sandbox;
mod settings;
mod upload;
mod util;
mod wait_graph;
