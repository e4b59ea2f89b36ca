//! Heartbeat wire format, authentication and replay protection (being written).
