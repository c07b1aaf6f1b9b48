//! Why a request to slaswitchd, the daemon itself or a calibration failed. Each names what was
//! tried and on what; a cause is part of the message (a field named `cause`, not a `source`
//! chain), so that the one line a control reply carries says all of it.

use std::path::PathBuf;
use std::process::ExitStatus;

use slaswitch_config::ConfigError;
use slaswitch_datapath::DatapathError;

/// A request that did not get its reply: the daemon out of reach, a reply that is not one, or
/// the daemon's refusal in its own words.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Nothing listens on the control socket.
    #[error(
        "cannot reach slaswitchd at {} ({cause}); is it running? (start it with slaswitchd, or set SLASWITCH_SOCKET)",
        .socket.display()
    )]
    Unreachable {
        /// The control socket.
        socket: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The request could not be sent or the reply read.
    #[error("{what}: {cause}")]
    Io {
        /// `sending to slaswitchd` or `reading slaswitchd's reply`.
        what: &'static str,
        /// Why.
        cause: std::io::Error,
    },
    /// A reply that does not decode as the request's reply type.
    #[error("slaswitchd sent a bad reply ({cause}): {line}")]
    BadReply {
        /// The reply line.
        line: String,
        /// Why it does not decode.
        cause: serde_json::Error,
    },
    /// The daemon refused the request; its reason, as it said it.
    #[error("{0}")]
    Refused(String),
}

/// A request line the daemon cannot read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Not JSON, or not a request.
    #[error("bad request: {0}")]
    Malformed(serde_json::Error),
    /// A field the request does not have.
    #[error("bad request: unknown field `{field}` for `{cmd}`")]
    UnknownField {
        /// The field given.
        field: String,
        /// The request's `cmd`.
        cmd: String,
    },
}

/// A request the daemon refused, or a daemon that could not start. Whatever it refused is left
/// as it was.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The data plane refused the change.
    #[error(transparent)]
    Datapath(#[from] DatapathError),
    /// A name or option refused by the configuration's rules.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file or folder the daemon reads or writes.
    #[error("cannot {action} {}: {cause}", .path.display())]
    File {
        /// `read`, `write`, `create`, `replace`, `sync`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The configuration file does not parse; the daemon will not overwrite it.
    #[error(
        "{} is not a valid slaswitch configuration ({cause}); {kept}; the daemon will not overwrite it: fix or remove it to start",
        .path.display()
    )]
    CorruptConfig {
        /// The file.
        path: PathBuf,
        /// Why it does not parse.
        cause: serde_json::Error,
        /// Where its copy went, or why there is none.
        kept: String,
    },
    /// A model file that cannot be read or is not a bandwidth-CPU model.
    #[error(transparent)]
    Model(#[from] slaswitch_config::model_file::ModelFileError),
    /// `load-model` of a file that is not there.
    #[error("{}: no such file (run slaswitch calibrate)", .0.display())]
    NoModelFile(PathBuf),
    /// `model-show` with no model loaded.
    #[error("no bandwidth-CPU model loaded ({} does not exist: run slaswitch calibrate)", .0.display())]
    NoModel(PathBuf),
    /// The model is taken but its copy could not be written.
    #[error("the model is in use but could not be saved to {}: {cause}", .path.display())]
    ModelNotSaved {
        /// The daemon's model file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// `link-show` with no paced port.
    #[error("no port is paced (set link_rate_bps on the uplink)")]
    NoPacedPort,
    /// `link-show` without a name, and several paced ports.
    #[error("several ports are paced ({0}): name one")]
    SeveralPaced(String),
    /// `--socket-group` names no group.
    #[error("--socket-group '{name}': {why}")]
    Group {
        /// The name given.
        name: String,
        /// `not a group name` or `no such group`.
        why: &'static str,
    },
    /// The run directory or control socket could not be made or given its mode.
    #[error("{what}: {cause}")]
    Access {
        /// What was tried, on what.
        what: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The control plane's runtime failed.
    #[error("the control plane: {0}")]
    ControlPlane(std::io::Error),
}

/// A calibration that could not measure.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// Not root.
    #[error("calibrate drives the data plane: run it as root")]
    NotRoot,
    /// Not enough free hugepages.
    #[error(
        "calibrate needs free hugepages (total {total}, free {free}, mounted {mounted}): echo 1024 > /proc/sys/vm/nr_hugepages"
    )]
    NoHugepages {
        /// Hugepages configured.
        total: u64,
        /// Free.
        free: u64,
        /// hugetlbfs is mounted.
        mounted: bool,
    },
    /// A switch already runs on this host.
    #[error(
        "slaswitchd is running: calibrating beside it would measure both. Stop it, calibrate, and start it again (it reads the model at start), or calibrate elsewhere and `slaswitch load-model FILE`"
    )]
    DaemonRunning,
    /// A program could not be started.
    #[error("cannot start {program}: {cause}")]
    Spawn {
        /// The program.
        program: &'static str,
        /// Why.
        cause: std::io::Error,
    },
    /// A program stopped before the measurement ended.
    #[error("{program} stopped early ({status}){log}")]
    Stopped {
        /// The program.
        program: &'static str,
        /// How it ended.
        status: ExitStatus,
        /// Its log, after a colon, when there is one.
        log: String,
    },
    /// The private switch or the VMs did not get going in time.
    #[error("{0}")]
    NotUp(&'static str),
    /// The options or the model lack what a step needs.
    #[error("{0}")]
    Plan(&'static str),
    /// A window in which a VM sent too little to measure.
    #[error("a VM forwarded fewer than 100 packets in {secs:.1} s: the VMs are not sending")]
    TooFew {
        /// The window's length.
        secs: f64,
    },
    /// A port of the private switch is gone.
    #[error("port {0} vanished")]
    PortVanished(String),
    /// The private switch refused or did not answer.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A file the calibration writes.
    #[error("{}: {cause}", .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
}

impl CalibrateError {
    /// What writing or making `path` returned, as a calibration error.
    pub fn file(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> CalibrateError + '_ {
        move |cause| CalibrateError::File { path: path.to_path_buf(), cause }
    }
}

impl DaemonError {
    /// What doing `action` to `path` returned, as a daemon error.
    pub fn file<'a>(
        action: &'static str,
        path: &'a std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> DaemonError + 'a {
        move |cause| DaemonError::File { action, path: path.to_path_buf(), cause }
    }
}
