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
pub use slaswitch_config::model_file::DEFAULT_MODEL_PATH;

/// The control socket: `$SLASWITCH_SOCKET`, or the default.
pub fn default_socket() -> String {
    std::env::var("SLASWITCH_SOCKET").unwrap_or_else(|_| format!("{DEFAULT_RUN_DIR}/{SOCKET_NAME}"))
}

/// Sends one request and returns its reply, or the daemon's error.
pub fn request(socket: &Path, req: &Request) -> Result<Response, ControlError> {
    let stream = UnixStream::connect(socket)
        .map_err(|cause| ControlError::Unreachable { socket: socket.to_path_buf(), cause })?;
    exchange(stream, req)
}

/// Writes the request and reads the one-line reply.
fn exchange(mut stream: UnixStream, req: &Request) -> Result<Response, ControlError> {
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut line = serde_json::to_string(req).expect("JSON");
    line.push('\n');
    let sent = stream.write_all(line.as_bytes());
    let mut reply = String::new();
    let read = BufReader::new(stream).read_line(&mut reply);
    // A daemon that refuses a connection (too many clients) answers and closes without reading
    // the request, so the write may fail while its answer waits to be read.
    match (sent, read) {
        (Err(cause), Ok(0) | Err(_)) => Err(ControlError::Io { what: "sending to slaswitchd", cause }),
        (Ok(()), Err(cause)) => Err(ControlError::Io { what: "reading slaswitchd's reply", cause }),
        _ => Reply::read(&reply, req),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_sent_before_the_request_was_read_is_still_read() {
        let (client, daemon) = UnixStream::pair().unwrap();
        let mut daemon = daemon;
        daemon.write_all(b"{\"ok\":false,\"error\":\"busy; try again\"}\n").unwrap();
        drop(daemon);
        match exchange(client, &Request::Show) {
            Err(ControlError::Refused(why)) => assert_eq!(why, "busy; try again"),
            other => panic!("expected the daemon's refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_daemon_gone_without_answering_is_a_send_or_read_error() {
        let (client, daemon) = UnixStream::pair().unwrap();
        drop(daemon);
        let err = exchange(client, &Request::Show).unwrap_err();
        assert!(matches!(err, ControlError::Io { what: "sending to slaswitchd", .. }), "{err:?}");
    }
}
