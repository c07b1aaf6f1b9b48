//! Port types and how each becomes a DPDK device.
//!
//! | type                | device                          | options                             |
//! |---------------------|---------------------------------|-------------------------------------|
//! | `vhost-user`        | `net_vhost`, the switch serves  | `path` (default RUN_DIR/NAME.sock)  |
//! | `vhost-user-client` | `net_vhost`, client, reconnects | `path` (required: the VM's socket)  |
//! | `tap`               | `net_tap`, a kernel interface   | `iface` (default NAME)              |
//! | `af-packet`         | `net_af_packet` on an interface | `iface` (required, e.g. a veth end) |
//! | `null`              | `net_null`, a sink (no rx)      |                                     |
//! | `dpdk`              | a PCI NIC by devargs            | `devargs` (e.g. 0000:3b:00.0); the  |
//! |                     |                                 | daemon must run with `--pci`        |
//!
//! Every type also takes `ofport_request` (the port number rules use), `rx_ring` and `tx_ring`
//! (descriptors, default 2048), `pmd` (the core whose PMD polls it) and the ingress policing
//! options of [`crate::policing`], the C2QoS options of [`crate::cpu_qos`] and the bandwidth
//! options of [`crate::bandwidth`] and the link schedulers' options of [`crate::link_policy`].
//! `pmd`, policing, C2QoS, bandwidth and link options change live; the others recreate the
//! device.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::port_settings::PortSettings;

/// The kinds of port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PortType {
    /// The switch serves a vhost-user socket.
    VhostUser,
    /// The VM serves the socket; the switch connects.
    VhostUserClient,
    /// A kernel tap interface.
    Tap,
    /// An existing kernel interface, over AF_PACKET.
    AfPacket,
    /// A sink that drops what it is given.
    Null,
    /// A PCI NIC.
    Dpdk,
}

impl PortType {
    /// Parses a type (OVS's names too).
    pub fn parse(s: &str) -> Result<PortType, crate::error::ConfigError> {
        Ok(match s {
            "vhost-user" | "dpdkvhostuser" => PortType::VhostUser,
            "vhost-user-client" | "dpdkvhostuserclient" => PortType::VhostUserClient,
            "tap" => PortType::Tap,
            "af-packet" | "af_packet" => PortType::AfPacket,
            "null" => PortType::Null,
            "dpdk" => PortType::Dpdk,
            _ => return Err(crate::error::ConfigError::PortType(s.into())),
        })
    }

    /// The type's name.
    pub fn name(&self) -> &'static str {
        match self {
            PortType::VhostUser => "vhost-user",
            PortType::VhostUserClient => "vhost-user-client",
            PortType::Tap => "tap",
            PortType::AfPacket => "af-packet",
            PortType::Null => "null",
            PortType::Dpdk => "dpdk",
        }
    }

    /// A port onto the host kernel's network stack (tap, af_packet): each send is a system call.
    pub fn is_kernel(&self) -> bool {
        matches!(self, PortType::Tap | PortType::AfPacket)
    }

    /// A vhost-user port (server or client socket).
    pub fn is_vhost(&self) -> bool {
        matches!(self, PortType::VhostUser | PortType::VhostUserClient)
    }

    fn allowed_options(&self) -> &'static [&'static str] {
        match self {
            PortType::VhostUser | PortType::VhostUserClient => &["path", "tso", "queues"],
            PortType::Tap | PortType::AfPacket => &["iface"],
            PortType::Null => &[],
            PortType::Dpdk => &["devargs"],
        }
    }
}

/// Options every port type takes besides those of [`crate::policing`], [`crate::cpu_qos`] and
/// [`crate::bandwidth`].
const DEVICE_OPTIONS: &[&str] = &["ofport_request", "rx_ring", "tx_ring", "pmd", "mtu_request"];

/// Every option every port type takes.
pub fn common_options() -> impl Iterator<Item = &'static str> {
    DEVICE_OPTIONS
        .iter()
        .chain(crate::policing::POLICING_OPTIONS)
        .chain(crate::cpu_qos::CPU_QOS_OPTIONS)
        .chain(crate::bandwidth::BANDWIDTH_OPTIONS)
        .chain(crate::link_policy::LINK_POLICY_OPTIONS)
        .copied()
}

/// Options a running port takes without recreating its device.
pub fn is_live_option(key: &str) -> bool {
    key == "pmd"
        || crate::policing::POLICING_OPTIONS.contains(&key)
        || crate::cpu_qos::CPU_QOS_OPTIONS.contains(&key)
        || crate::bandwidth::BANDWIDTH_OPTIONS.contains(&key)
        || crate::link_policy::LINK_POLICY_OPTIONS.contains(&key)
}

/// A port as configured (and persisted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortSpec {
    /// Its name (1 to 15 characters).
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub port_type: PortType,
    /// The port number rules refer to (OpenFlow's ofport).
    pub number: u16,
    /// Its options, as given.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

/// How to create the DPDK device for a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRecipe {
    /// vdev name, or the PCI device name for `dpdk`.
    pub device: String,
    /// Device arguments.
    pub args: String,
    /// A virtual device (vdev), not a probed one.
    pub is_vdev: bool,
}

/// Queue pairs a vhost port may have (`queues`).
pub const MAX_VHOST_QUEUES: u16 = 16;

/// Port names may become interface names: at most 15 characters (IFNAMSIZ - 1).
fn valid_name(name: &str) -> Result<(), crate::error::ConfigError> {
    crate::names::valid_name("port name", name, 15)
}

impl PortSpec {
    /// Checks the name and every option, and returns the typed settings; `number` is filled
    /// in by the caller.
    pub fn validate(&self) -> Result<PortSettings, crate::error::ConfigError> {
        valid_name(&self.name)?;
        for key in self.options.keys() {
            if !common_options().any(|o| o == key) && !self.port_type.allowed_options().contains(&key.as_str()) {
                let mut known: Vec<&str> = common_options().collect();
                known.extend(self.port_type.allowed_options());
                return Err(crate::error::ConfigError::UnknownOption {
                    port_type: self.port_type.name(),
                    port: self.name.clone(),
                    key: key.clone(),
                    known: known.join(", "),
                });
            }
        }
        let settings = PortSettings::parse(&self.options)?;
        self.tso()?;
        self.queues()?;
        let needs = match self.port_type {
            PortType::VhostUserClient => Some(("path", "path=SOCKET (the VM's vhost-user socket)")),
            PortType::AfPacket => Some(("iface", "iface=INTERFACE")),
            PortType::Dpdk => Some(("devargs", "devargs=PCI_ADDRESS")),
            _ => None,
        };
        match needs {
            Some((key, option)) if !self.options.contains_key(key) => Err(crate::error::ConfigError::MissingOption {
                port_type: self.port_type.name(),
                port: self.name.clone(),
                option,
            }),
            _ => Ok(settings),
        }
    }

    /// Whether the guest on a vhost port may send and receive TCP segments of up to 64 KB
    /// (virtio-net's TSO, option `tso`, on by default): the switch passes them on to guests that
    /// take them and segments them for every other port. False for other port types.
    pub fn tso(&self) -> Result<bool, crate::error::ConfigError> {
        match self.port_type {
            PortType::VhostUser | PortType::VhostUserClient => {
                crate::bandwidth::two_way(&self.options, "tso", ["false", "true"], true)
            }
            _ => Ok(false),
        }
    }

    /// Rx/tx queue pairs of a vhost port (option `queues`, 1 when absent): a guest with several
    /// vCPUs sends on all of them; the port's PMD polls them all, as one port. Other port
    /// types have one.
    pub fn queues(&self) -> Result<u16, crate::error::ConfigError> {
        match self.port_type {
            PortType::VhostUser | PortType::VhostUserClient => {
                Ok(crate::ranges::number_in(&self.options, "queues", 1..=MAX_VHOST_QUEUES)?.unwrap_or(1))
            }
            _ => Ok(1),
        }
    }

    /// Its vhost-user socket, for vhost-user ports.
    pub fn socket_path(&self, run_dir: &Path) -> Option<String> {
        match self.port_type {
            PortType::VhostUser => Some(
                self.options
                    .get("path")
                    .cloned()
                    .unwrap_or_else(|| run_dir.join(format!("{}.sock", self.name)).display().to_string()),
            ),
            PortType::VhostUserClient => self.options.get("path").cloned(),
            _ => None,
        }
    }

    /// The DPDK device for this port. vdev names carry the port number, so they are unique.
    pub fn recipe(&self, run_dir: &Path) -> DeviceRecipe {
        let n = self.number;
        let vdev = |driver: &str, args: String| DeviceRecipe { device: format!("{driver}_ss{n}"), args, is_vdev: true };
        let vhost = |client: u8| {
            let tso = u8::from(self.tso().unwrap_or(true));
            let queues = self.queues().unwrap_or(1);
            let path = self.socket_path(run_dir).expect("vhost path");
            vdev("net_vhost", format!("iface={path},queues={queues},client={client},tso={tso}"))
        };
        match self.port_type {
            PortType::VhostUser => vhost(0),
            PortType::VhostUserClient => vhost(1),
            PortType::Tap => vdev("net_tap", format!("iface={}", self.options.get("iface").unwrap_or(&self.name))),
            PortType::AfPacket => vdev("net_af_packet", format!("iface={},qpairs=1", self.options["iface"])),
            // A sink: the null driver would otherwise make up packets on every rx poll.
            PortType::Null => vdev("net_null", "no-rx=1".to_string()),
            PortType::Dpdk => {
                DeviceRecipe { device: self.options["devargs"].clone(), args: String::new(), is_vdev: false }
            }
        }
    }
}
