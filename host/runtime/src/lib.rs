//! cordon-runtime
