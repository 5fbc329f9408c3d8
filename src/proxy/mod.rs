//! Forwarding: the upstream client and the header rules at the boundary.
//! Only bodies the guard allowed (or pass-through requests) get here.

pub mod forward;
pub mod headers;

pub use forward::{set_event_loop, Upstream};
pub use headers::Client;
