#![warn(missing_docs)]
//! The classification stage of the slaswitch data plane, as plain data structures (no I/O):
//! * [`parse`]: defensive parsing of a frame into a [`FlowKey`] (never reads out of bounds).
//! * [`rule`]: rules with a priority, a masked match and actions; text syntax like `ovs-ofctl`.
//! * [`tss`]: the wildcard classifier, one hash table per distinct mask (tuple space search).
//! * [`prefix_trie`]: the rules' IP prefixes, so a lookup skips subtables no prefix can match.
//! * [`megaflow`]: wildcarded flows between the two caches, each answering every flow that agrees
//!   on the bits the rules looked at (OVS's megaflow cache).
//! * [`emc`]: the exact-match cache in front of them (8192 entries, as OVS's EMC).
//! * [`mac_learning`]: the MAC table behind the `normal` action.
//!
//! A miss in both caches costs a walk over the subtables, so traffic with many flows costs more
//! classification cycles per packet than one flow: the variation the C2QoS model
//! measures (seed 000 Sec. III-B, Fig. 5c).

pub mod emc;
pub mod flow_key;
pub mod mac_learning;
pub mod megaflow;
pub mod parse;
pub mod prefix_trie;
pub mod rule;
pub mod security_group;
pub mod tss;

pub use emc::ExactMatchCache;
pub use flow_key::FlowKey;
pub use mac_learning::MacTable;
pub use megaflow::MegaflowCache;
pub use parse::{check_frame, check_head, parse_frame, parse_head, ParseError};
pub use rule::{Action, Match, Rule, RuleError};
pub use tss::{Classifier, RuleId};
