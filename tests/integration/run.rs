//! Integration tests: run.
