//! Encoding flows for export (to be written).
