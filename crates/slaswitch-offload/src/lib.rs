#![warn(missing_docs)]
//! slaswitch-offload: what the switch does in software for a frame whose offloads the port it
//! goes to cannot take. A virtio-net guest that negotiated checksum offload sends TCP and UDP with
//! a partial checksum, and one that negotiated TSO sends TCP segments of up to 64 KB; a tap,
//! af_packet or paced port, or a guest without those features, needs whole checksums and frames
//! no longer than its MTU.
//!
//! No I/O and no DPDK: frames are byte slices (a chained buffer is a list of them), so the
//! property tests and the benchmark drive the same code as the data plane.

pub mod checksum;
pub mod headers;
pub mod segment;

pub use checksum::{l4_checksum, Checksum};
pub use headers::{Headers, Ip, L4};
pub use segment::{Chain, SegmentError, Segments};
