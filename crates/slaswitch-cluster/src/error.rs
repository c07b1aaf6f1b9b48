//! Why a fleet operation failed: etcd or a purchase ([`FleetError`]), the billing store, a process.
//! A cause is part of the message (a field named `cause`), so one line of text carries all of it.

use slaswitch_agent::FleetError;
use slaswitch_config::ConfigError;
use slaswitch_plot::PlotError;

/// A fleet operation that failed, and why.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// etcd, or a purchase refused, malformed or not answered.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// The SQLite billing store failed.
    #[error("billing store: {cause}")]
    Sqlite {
        /// SQLite's error.
        cause: rusqlite::Error,
    },
    /// The PostgreSQL billing store failed.
    #[error("billing store: {cause}")]
    Postgres {
        /// PostgreSQL's error.
        cause: postgres::Error,
    },
    /// The billing store could not be opened.
    #[error("{what}: {cause}")]
    StoreOpen {
        /// What was tried (`cannot open PATH`, `cannot connect to URL`).
        what: String,
        /// Why.
        cause: String,
    },
    /// No billing store where one was expected.
    #[error("no billing store at {0} (give the --db the master serves with)")]
    NoStore(String),
    /// The thread that owns the billing store has ended.
    #[error("the billing store's thread ended")]
    StoreThread,
    /// A file, folder, socket or process of the fleet could not be made.
    #[error("{what}: {cause}")]
    Io {
        /// What was tried.
        what: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The private etcd's certificates could not be made.
    #[error("{0}")]
    Tls(String),
    /// The private etcd did not start.
    #[error("etcd did not come up: {0}")]
    EtcdDown(String),
    /// The private etcd exited while starting (its status and log).
    #[error("etcd exited while starting: {0}")]
    EtcdExited(String),
    /// Simulated agents that did not come up.
    #[error("only {up} of {agents} agents came up in 120 s")]
    AgentsDown {
        /// Agents up.
        up: usize,
        /// Agents started.
        agents: usize,
    },
    /// A value refused by the switch's own rules.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Prices refused by the pricing's own rules.
    #[error(transparent)]
    Qos(#[from] slaswitch_qos::QosError),
    /// A bill's chart.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

impl ClusterError {
    /// A VM's purchase refused, not found or not answered.
    pub fn vm(vm: &str, why: impl Into<String>) -> ClusterError {
        FleetError::vm(vm, why).into()
    }

    /// What doing `what` returned, as a fleet error.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
        let what = what.into();
        move |cause| ClusterError::Io { what, cause }
    }
}

impl From<rusqlite::Error> for ClusterError {
    fn from(cause: rusqlite::Error) -> ClusterError {
        ClusterError::Sqlite { cause }
    }
}

impl From<postgres::Error> for ClusterError {
    fn from(cause: postgres::Error) -> ClusterError {
        ClusterError::Postgres { cause }
    }
}
