//! A scripted OpenAI-compatible chat server for tests.
