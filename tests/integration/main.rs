//! The one integration test binary (ripgrep style). Modules per area.
