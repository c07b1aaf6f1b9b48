//! Reaching `slaswitchd`: where its socket is, and one [`Request`] sent over it (the protocol
//! is [`crate::protocol`]).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::error::ControlError;
use crate::protocol::{Reply, Request, Response};

/// Where the daemon's socket and vhost-user sockets are by default.
pub const DEFAULT_RUN_DIR: &str = "/var/run/slaswitch";
/// The control socket's file name.
pub const SOCKET_NAME: &str = "slaswitchd.ctl";
/// Where slaswitchd reads the bandwidth-CPU model and `slaswitch calibrate` writes it.
pub const DEFAULT_MODEL_PATH: &str = "/var/lib/slaswitch/bandwidth-model.json";

/// The control socket: `$SLASWITCH_SOCKET`, or the default.
pub fn default_socket() -> String {
    std::env::var("SLASWITCH_SOCKET").unwrap_or_else(|_| format!("{DEFAULT_RUN_DIR}/{SOCKET_NAME}"))
}

/// Sends one request and returns its reply, or the daemon's error.
pub fn request(socket: &Path, req: &Request) -> Result<Response, ControlError> {
    let mut stream = UnixStream::connect(socket)
        .map_err(|cause| ControlError::Unreachable { socket: socket.to_path_buf(), cause })?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut line = serde_json::to_string(req).expect("JSON");
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(|cause| ControlError::Io { what: "sending to slaswitchd", cause })?;
    let mut reply = String::new();
    BufReader::new(stream)
        .read_line(&mut reply)
        .map_err(|cause| ControlError::Io { what: "reading slaswitchd's reply", cause })?;
    Reply::read(&reply, req)
}
