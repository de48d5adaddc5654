//! cordon-home
