//! cordon-core
