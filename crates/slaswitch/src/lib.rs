#![warn(missing_docs)]
//! slaswitch's programs: the daemon, its CLI and the emulated VM.

pub mod calibrate;
pub mod control;
#[cfg(feature = "daemon")]
pub mod daemon;
pub mod error;
pub mod protocol;
pub mod signals;
pub mod tenant;
