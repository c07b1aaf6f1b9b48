//! Why talking to the fleet failed: etcd, or a purchase refused, malformed or not answered.
//! A cause is part of the message (a field named `cause`), so one line of text carries all of it.

use slaswitch_config::ConfigError;

/// A fleet operation over etcd that failed, and why.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// etcd refused or failed a request.
    #[error("{cause}")]
    Etcd {
        /// etcd's error.
        cause: etcd_client::Error,
    },
    /// No etcd endpoint answered.
    #[error("cannot reach etcd at {endpoints}: {cause}")]
    Connect {
        /// The endpoints tried, comma separated.
        endpoints: String,
        /// The last error.
        cause: etcd_client::Error,
    },
    /// TLS to etcd is misconfigured: a file missing or the options incomplete.
    #[error("etcd TLS: {0}")]
    Tls(String),
    /// A watch stream ended.
    #[error("the watch ended")]
    WatchEnded,
    /// etcd cancelled a watch.
    #[error("the watch was cancelled: {0}")]
    WatchCancelled(String),
    /// The agent's lease ran out.
    #[error("the lease expired")]
    LeaseExpired,
    /// A VM's purchase: refused, not found, or not answered.
    #[error("vm {vm}: {why}")]
    Vm {
        /// The VM.
        vm: String,
        /// What is wrong.
        why: String,
    },
    /// An etcd value that is not a purchase.
    #[error("{key}: not a purchase: {cause}")]
    NotPurchase {
        /// Its key.
        key: String,
        /// Why it does not parse.
        cause: serde_json::Error,
    },
    /// A purchase's cycle option that is not one.
    #[error("cycles: {key} is not a purchase option (allowed: {allowed})")]
    NotCycleOption {
        /// The option.
        key: String,
        /// The options a purchase takes.
        allowed: String,
    },
    /// A value refused by the switch's own rules.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Prices refused by the pricing's own rules.
    #[error(transparent)]
    Qos(#[from] slaswitch_qos::QosError),
}

impl FleetError {
    /// A VM's purchase refused, not found or not answered.
    pub fn vm(vm: &str, why: impl Into<String>) -> FleetError {
        FleetError::Vm { vm: vm.to_string(), why: why.into() }
    }
}
