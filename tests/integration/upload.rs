//! Integration tests: upload.
