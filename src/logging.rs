//! logging
