//! Why a port's options, a name or a set of purchases were refused. Each error names what was
//! given and what is allowed, so an operator can fix it in one go; callers that speak in text
//! (the control socket's replies) take its `Display`.

/// A refused configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An option's value is not allowed.
    #[error("{key}={value}: {allowed}")]
    Value {
        /// The option.
        key: String,
        /// What was given.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// A name that does not follow the names' pattern.
    #[error("{what} '{name}': 1 to {max_len} letters, digits, '-' or '_', starting with a letter or a digit")]
    Name {
        /// What kind of name, e.g. "port name".
        what: &'static str,
        /// The name given.
        name: String,
        /// Its longest allowed length.
        max_len: usize,
    },
    /// An option word without `=`.
    #[error("'{0}' is not key=value")]
    NotKeyValue(String),
    /// A port type no one knows.
    #[error("unknown port type '{0}' (vhost-user, vhost-user-client, tap, af-packet, null, dpdk)")]
    PortType(String),
    /// An option the port's type does not take.
    #[error("{port_type} port {port}: unknown option '{key}' (known: {known})")]
    UnknownOption {
        /// The port's type.
        port_type: &'static str,
        /// The port.
        port: String,
        /// The option given.
        key: String,
        /// The options it takes, comma separated.
        known: String,
    },
    /// An option the port's type needs.
    #[error("{port_type} port {port} needs {option}")]
    MissingOption {
        /// The port's type.
        port_type: &'static str,
        /// The port.
        port: String,
        /// The option and what it holds.
        option: &'static str,
    },
    /// A minimum above the maximum of the same link.
    #[error("link_min_bps={min_bps} is above link_max_bps={max_bps}")]
    MinAboveMax {
        /// The minimum, bits/s.
        min_bps: u64,
        /// The maximum, bits/s.
        max_bps: u64,
    },
    /// A port's purchase that cannot be turned into an allocation.
    #[error("port {port}: {why}")]
    Purchase {
        /// The port.
        port: String,
        /// Why.
        why: String,
    },
    /// Admission refused a change: what it would commit against what there is.
    #[error("{changed}: {why}")]
    Refused {
        /// The change (a port, or the ports being planned).
        changed: String,
        /// The figures that do not fit.
        why: String,
    },
}

impl ConfigError {
    /// An option's value that is not allowed.
    pub fn value(key: &str, value: &str, allowed: impl Into<String>) -> ConfigError {
        ConfigError::Value { key: key.into(), value: value.into(), allowed: allowed.into() }
    }
}
