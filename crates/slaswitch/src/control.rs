//! The control protocol between `slaswitch` and `slaswitchd`: one JSON request per connection on
//! a Unix socket, one JSON reply, newline-terminated.
//! Request: `{"cmd": "add-port", ...arguments}`. Reply: `{"ok": true, "result": ...}` or
//! `{"ok": false, "error": "what was wrong"}`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

pub const DEFAULT_RUN_DIR: &str = "/var/run/slaswitch";
pub const SOCKET_NAME: &str = "slaswitchd.ctl";
/// Where slaswitchd reads the bandwidth-CPU model and `slaswitch calibrate` writes it.
pub const DEFAULT_MODEL_PATH: &str = "/var/lib/slaswitch/bandwidth-model.json";

pub fn default_socket() -> String {
    std::env::var("SLASWITCH_SOCKET").unwrap_or_else(|_| format!("{DEFAULT_RUN_DIR}/{SOCKET_NAME}"))
}

pub fn ok(result: Value) -> Value {
    json!({"ok": true, "result": result})
}

pub fn err(message: impl Into<String>) -> Value {
    json!({"ok": false, "error": message.into()})
}

/// Sends one request and returns the result, or the daemon's error.
pub fn request(socket: &Path, req: &Value) -> Result<Value, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach slaswitchd at {} ({e}); is it running? (start it with slaswitchd, or set SLASWITCH_SOCKET)",
            socket.display()
        )
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut line = serde_json::to_string(req).expect("JSON");
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(|e| format!("sending to slaswitchd: {e}"))?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).map_err(|e| format!("reading slaswitchd's reply: {e}"))?;
    let v: Value = serde_json::from_str(&reply).map_err(|e| format!("slaswitchd sent a bad reply ({e}): {reply}"))?;
    if v["ok"].as_bool() == Some(true) {
        Ok(v["result"].clone())
    } else {
        Err(v["error"].as_str().unwrap_or("unknown error").to_string())
    }
}
