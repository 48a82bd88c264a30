//! Connections (placeholder).
