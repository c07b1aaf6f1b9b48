#![warn(missing_docs)]
//! The classification stage of the slaswitch data plane, as plain data structures (no I/O):
//! * [`parse`]: defensive parsing of a frame into a [`FlowKey`] (never reads out of bounds).
//! * [`rule`]: rules with a priority, a masked match and actions; text syntax like `ovs-ofctl`.
//! * [`tss`]: the wildcard classifier, one hash table per distinct mask (tuple space search).
//! * [`emc`]: the per-PMD exact-match cache in front of it (8192 entries, as OVS's EMC).
//! * [`mac_learning`]: the MAC table behind the `normal` action.
//!
//! A miss in the exact-match cache costs a walk over the subtables, so traffic with many flows
//! costs more classification cycles per packet than one flow: the variation the C2QoS model
//! measures (seed 000 Sec. III-B, Fig. 5c).

pub mod emc;
pub mod flow_key;
pub mod mac_learning;
pub mod parse;
pub mod rule;
pub mod security_group;
pub mod tss;

pub use emc::ExactMatchCache;
pub use flow_key::FlowKey;
pub use mac_learning::MacTable;
pub use parse::{parse_frame, ParseError};
pub use rule::{Action, Match, Rule};
pub use tss::{Classifier, RuleId};
