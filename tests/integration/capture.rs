//! Integration tests: capture.
