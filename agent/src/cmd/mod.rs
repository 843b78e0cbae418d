//! One module per subcommand.

pub mod capture;
pub mod decode_ioctl;
pub mod report;
pub mod ring;
pub mod upload;
