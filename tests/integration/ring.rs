//! Integration tests: ring.
