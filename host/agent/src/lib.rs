//! cordon-agent
