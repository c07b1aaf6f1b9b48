#![warn(missing_docs)]
//! slaswitch-sim: studies a provider runs before it sells, on the switch's own QoS code.
//!
//! [`overcommit`]: how far bandwidth guarantees can be over-committed for a failure rate
//! (SoftBW, seed 003 Sec. 2.2): Eq. 2 from `slaswitch-qos`, checked by [`monte_carlo`].

pub mod monte_carlo;
pub mod overcommit;
