#![warn(missing_docs)]
//! The traffic of emulated VMs, shared by the tenant (which sends and receives it) and the test
//! bed (which checks scenario files and knows each VM's addresses).

pub mod frames;
pub mod meter;
pub mod phase;
pub mod short_flows;

/// A traffic description that does not parse: what was given, and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{given}: {allowed}")]
pub struct SpecError {
    /// What was given, e.g. `rate='fast'` or `size=9000`.
    pub given: String,
    /// What is allowed.
    pub allowed: String,
}

impl SpecError {
    /// `given` is refused; `allowed` says what is taken.
    pub fn new(given: impl Into<String>, allowed: impl Into<String>) -> SpecError {
        SpecError { given: given.into(), allowed: allowed.into() }
    }
}
