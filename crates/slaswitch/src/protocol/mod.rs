//! The control protocol shared by `slaswitch`, `slaswitchd` and the tools that drive a switch:
//! one [`Request`] per connection as a JSON line, answered by one [`Reply`] line.
//!
//! Request: `{"cmd": "add-port", "name": "vm1", "type": "vhost-user", "options": {...}}`.
//! Reply: `{"ok": true, "result": ...}` or `{"ok": false, "error": "what was wrong"}`; the
//! result is the request's reply type ([`replies`], [`stats`], [`qos`]).

pub mod pmd_moves;
pub mod qos;
mod render;
mod render_link;
mod render_qos;
pub mod replies;
pub mod slo;
pub mod stats;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ControlError, RequestError};

pub use replies::{Response, SavedConfig};

/// A port's options as `key=value` words give them.
pub type Options = BTreeMap<String, String>;

/// Everything the daemon can be asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Adds a port of `port_type` (`vhost-user`, `tap`, ...).
    AddPort {
        /// The port's name.
        name: String,
        /// Its type.
        #[serde(rename = "type")]
        port_type: String,
        /// Its options, `key: value`.
        #[serde(default)]
        options: Options,
    },
    /// Deletes a port.
    DelPort {
        /// The port's name.
        name: String,
    },
    /// Changes one port's options, or several ports' as one step (admission judges the final
    /// state; live options only when there are several).
    SetPort {
        /// Each port and the options set on it.
        ports: Vec<PortChange>,
    },
    /// Every port.
    ListPorts,
    /// Adds flows, all or none.
    AddFlow {
        /// Flows as `add-flow` text.
        flows: Vec<String>,
    },
    /// Deletes the flows `matcher` selects (all without one).
    DelFlows {
        /// A match, as `add-flow` text without actions.
        #[serde(rename = "match", default)]
        matcher: Option<String>,
        /// Only flows whose match (and priority) equal it exactly.
        #[serde(default)]
        strict: bool,
    },
    /// Every flow with its counters.
    DumpFlows,
    /// Ports' counters and rates.
    PortStats {
        /// One port (all without).
        #[serde(default)]
        name: Option<String>,
    },
    /// Every PMD thread's figures.
    PmdStats,
    /// What C2QoS gives each port and why.
    QosShow {
        /// One port (all without).
        #[serde(default)]
        name: Option<String>,
    },
    /// Uses a bandwidth-CPU model file (default: the daemon's own).
    LoadModel {
        /// The model file, as the daemon sees the path.
        #[serde(default)]
        path: Option<PathBuf>,
    },
    /// The model in use.
    ModelShow,
    /// A paced port's link scheduler and every VM in it.
    LinkShow {
        /// The paced port (the only one when absent).
        #[serde(default)]
        name: Option<String>,
    },
    /// Adds a tenant (PIE-VDE's first level) or changes its weight.
    SetTenant {
        /// Its name.
        name: String,
        /// Its weight among tenants.
        weight: u32,
    },
    /// Removes a tenant no port names.
    DelTenant {
        /// Its name.
        name: String,
    },
    /// The persisted configuration.
    Show,
}

/// One port's part of a `set-port`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortChange {
    /// The port's name.
    pub name: String,
    /// The options to set, `key: value`.
    #[serde(default)]
    pub options: Options,
}

/// The daemon's answer: a result, or why nothing changed.
#[derive(Clone, Debug)]
pub enum Reply {
    /// It was done; the result.
    Ok(Response),
    /// Nothing changed; why.
    Err(String),
}

/// The reply as it travels.
#[derive(Serialize, Deserialize)]
struct WireReply<T> {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Serialize for Reply {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Reply::Ok(r) => WireReply { ok: true, result: Some(r), error: None }.serialize(s),
            Reply::Err(e) => WireReply::<()> { ok: false, result: None, error: Some(e.clone()) }.serialize(s),
        }
    }
}

impl Reply {
    /// Reads the reply line to `req`: its result as the request's reply type, or the daemon's
    /// error.
    pub fn read(line: &str, req: &Request) -> Result<Response, ControlError> {
        let bad = |cause| ControlError::BadReply { line: line.trim_end().to_string(), cause };
        let wire: WireReply<Value> = serde_json::from_str(line).map_err(bad)?;
        if !wire.ok {
            return Err(ControlError::Refused(wire.error.unwrap_or_else(|| "unknown error".into())));
        }
        req.decode_reply(wire.result.unwrap_or(Value::Null)).map_err(bad)
    }
}

impl<E: std::fmt::Display> From<Result<Response, E>> for Reply {
    fn from(r: Result<Response, E>) -> Self {
        match r {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Err(e.to_string()),
        }
    }
}

/// Reads a request line; the error says what a client got wrong.
pub fn parse_request(line: &str) -> Result<Request, RequestError> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(RequestError::Malformed)?;
    let req: Request = serde_json::from_value(value.clone()).map_err(RequestError::Malformed)?;
    // serde lets an internally tagged unit variant (`pmd-stats`) carry any fields; refuse them
    // as every other variant does.
    let known = serde_json::to_value(&req).map_err(RequestError::Malformed)?;
    if let (Some(given), Some(known)) = (value.as_object(), known.as_object()) {
        if let Some(extra) = given.keys().find(|k| !known.contains_key(*k)) {
            let cmd = known["cmd"].as_str().unwrap_or("?").to_string();
            return Err(RequestError::UnknownField { field: extra.clone(), cmd });
        }
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_travel_as_tagged_json_and_come_back_the_same() {
        let req = Request::SetPort {
            ports: vec![PortChange { name: "vm1".into(), options: [("priority".into(), "1".into())].into() }],
        };
        let line = serde_json::to_string(&req).unwrap();
        assert_eq!(line, r#"{"cmd":"set-port","ports":[{"name":"vm1","options":{"priority":"1"}}]}"#);
        assert_eq!(parse_request(&line).unwrap(), req);
        assert_eq!(parse_request(r#"{"cmd":"pmd-stats"}"#).unwrap(), Request::PmdStats);
    }

    #[test]
    fn a_bad_request_is_refused_with_what_was_wrong() {
        let e = parse_request(r#"{"cmd":"add-port","name":"vm1"}"#).unwrap_err().to_string();
        assert!(e.contains("type"), "{e}");
        let e = parse_request(r#"{"cmd":"reboot"}"#).unwrap_err().to_string();
        assert!(e.contains("reboot") && e.contains("add-port"), "{e}");
        let e = parse_request(r#"{"cmd":"del-port","name":"vm1","force":true}"#).unwrap_err().to_string();
        assert!(e.contains("force"), "{e}");
    }

    #[test]
    fn replies_keep_their_wire_shape_and_read_back_as_the_requests_type() {
        let added = Reply::Ok(Response::FlowsAdded(replies::FlowsAdded { added: 1 }));
        let ok = serde_json::to_string(&added).unwrap();
        assert_eq!(ok, r#"{"ok":true,"result":{"added":1}}"#);
        let req = Request::AddFlow { flows: vec!["actions=drop".into()] };
        assert!(matches!(Reply::read(&ok, &req), Ok(Response::FlowsAdded(replies::FlowsAdded { added: 1 }))));
        let err = Reply::read(r#"{"ok":false,"error":"no port named 'x'"}"#, &req).unwrap_err();
        assert!(matches!(&err, ControlError::Refused(e) if e == "no port named 'x'"), "{err}");
        // A result of another request's shape is refused, naming what is missing.
        let e = Reply::read(r#"{"ok":true,"result":{"deleted":"vm1"}}"#, &req).unwrap_err().to_string();
        assert!(e.contains("added"), "{e}");
    }
}
