//! Each request's reply type, and [`Response`], the reply of any request: the daemon builds one,
//! the CLI and the tools decode it by the request they sent ([`Request::decode_reply`]) and
//! render it with `Display`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use slaswitch_config::PortSpec;
use slaswitch_datapath::FlowStats;

use super::qos::{LinkShowReply, ModelShowReply, QosShowReply};
use super::stats::{PmdStatsReply, PortList, PortStatsReply};
use super::Request;

/// `add-port`: the port as added.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortAdded {
    /// Its name.
    pub name: String,
    /// Its number (given or chosen).
    pub number: u16,
    /// Its vhost-user socket, if it has one.
    pub socket: Option<PathBuf>,
}

/// `del-port`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortDeleted {
    /// The port's name.
    pub deleted: String,
}

/// `set-port`: the ports as they now are (one, or several changed as one step).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PortsSet {
    /// One port.
    One(PortSpec),
    /// Several, in the order asked.
    Several(Vec<PortSpec>),
}

/// `add-flow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowsAdded {
    /// Flows added.
    pub added: usize,
}

/// `del-flows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowsDeleted {
    /// Flows deleted.
    pub deleted: usize,
}

/// `dump-flows`: every flow with its counters.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FlowList(pub Vec<FlowStats>);

/// `load-model`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelLoaded {
    /// The file read.
    pub loaded: PathBuf,
    /// Where the daemon keeps it.
    pub saved_as: PathBuf,
}

/// `set-tenant`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantSet {
    /// The tenant.
    pub tenant: String,
    /// Its weight now.
    pub weight: u32,
}

/// `del-tenant`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantDeleted {
    /// The tenant's name.
    pub deleted: String,
}

/// `show`, and what the daemon persists: tenants, ports and flows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedConfig {
    /// PIE-VDE's tenants and their weights (restored before the ports that name them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, u32>,
    /// Every port, as configured.
    pub ports: Vec<PortSpec>,
    /// Flows as `add-flow` text, with port names.
    pub flows: Vec<String>,
}

/// The reply of any request; on the wire, the reply type alone.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Response {
    /// `add-port`.
    PortAdded(PortAdded),
    /// `del-port`.
    PortDeleted(PortDeleted),
    /// `set-port`.
    PortsSet(PortsSet),
    /// `list-ports`.
    Ports(PortList),
    /// `add-flow`.
    FlowsAdded(FlowsAdded),
    /// `del-flows`.
    FlowsDeleted(FlowsDeleted),
    /// `dump-flows`.
    Flows(FlowList),
    /// `port-stats`.
    PortStats(PortStatsReply),
    /// `pmd-stats`.
    PmdStats(PmdStatsReply),
    /// `qos-show`.
    QosShow(Box<QosShowReply>),
    /// `load-model`.
    ModelLoaded(ModelLoaded),
    /// `model-show`.
    Model(Box<ModelShowReply>),
    /// `link-show`.
    LinkShow(Box<LinkShowReply>),
    /// `set-tenant`.
    TenantSet(TenantSet),
    /// `del-tenant`.
    TenantDeleted(TenantDeleted),
    /// `show`.
    Config(SavedConfig),
}

impl Request {
    /// Reads `result`, the reply to this request, as its type.
    pub fn decode_reply(&self, result: serde_json::Value) -> Result<Response, serde_json::Error> {
        use serde_json::from_value as de;
        Ok(match self {
            Request::AddPort { .. } => Response::PortAdded(de(result)?),
            Request::DelPort { .. } => Response::PortDeleted(de(result)?),
            Request::SetPort { .. } => Response::PortsSet(de(result)?),
            Request::ListPorts => Response::Ports(de(result)?),
            Request::AddFlow { .. } => Response::FlowsAdded(de(result)?),
            Request::DelFlows { .. } => Response::FlowsDeleted(de(result)?),
            Request::DumpFlows => Response::Flows(de(result)?),
            Request::PortStats { .. } => Response::PortStats(de(result)?),
            Request::PmdStats => Response::PmdStats(de(result)?),
            Request::QosShow { .. } => Response::QosShow(de(result)?),
            Request::LoadModel { .. } => Response::ModelLoaded(de(result)?),
            Request::ModelShow => Response::Model(de(result)?),
            Request::LinkShow { .. } => Response::LinkShow(de(result)?),
            Request::SetTenant { .. } => Response::TenantSet(de(result)?),
            Request::DelTenant { .. } => Response::TenantDeleted(de(result)?),
            Request::Show => Response::Config(de(result)?),
        })
    }
}
