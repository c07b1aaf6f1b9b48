//! Flow rules: a priority, a masked match and actions, written the way `ovs-ofctl add-flow` reads
//! them, e.g. `priority=100,in_port=1,tcp,nw_dst=10.0.0.0/24,tp_dst=80,actions=output:2`.
//!
//! Match fields: `in_port`, `dl_src`, `dl_dst` (MAC, optionally `/mask`), `dl_type`, `dl_vlan`,
//! `nw_src`, `nw_dst` (IPv4 with `/prefix`), `ipv6_src`, `ipv6_dst` (with `/prefix`), `nw_proto`,
//! `tp_src`, `tp_dst` (a port or `port/mask`); shorthands `ip`, `ipv6`, `arp`, `tcp`, `udp`, `icmp`, `tcp6`, `udp6`.
//! Actions: `output:PORT`, `drop`, `normal` (MAC learning). Port names are resolved by the caller.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::flow_key::{FlowKey, VLAN_PRESENT};
use crate::parse::*;

/// What a matching packet's rule does with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Send it to this port number.
    Output(u16),
    /// Drop it.
    Drop,
    /// Forward it as a MAC-learning switch would.
    Normal,
}

/// Values under a mask: a field matches when `packet & mask == key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Match {
    /// The values to match, already masked.
    pub key: FlowKey,
    /// Which bits of the key count.
    pub mask: FlowKey,
}

impl Match {
    /// The match that takes every packet.
    pub fn any() -> Match {
        Match::default()
    }

    /// True when the packet's key agrees with this match on every masked bit.
    #[inline]
    pub fn matches(&self, packet: &FlowKey) -> bool {
        packet.masked(&self.mask) == self.key
    }
}

/// An OpenFlow-style rule: priority, match, actions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Higher wins among the rules that match.
    pub priority: u32,
    /// What it matches.
    pub matcher: Match,
    /// What it does, in order.
    pub actions: Vec<Action>,
}

/// The best priority among `rules` that match `key`, found by trying each: the reference the
/// classifier and its caches are tested against.
pub fn scan_priority(rules: &[Rule], key: &FlowKey) -> Option<u32> {
    rules.iter().filter(|r| r.matcher.matches(key)).map(|r| r.priority).max()
}

/// The priority of a rule that gives none (OpenFlow's).
pub const DEFAULT_PRIORITY: u32 = 32768;

/// Why a rule's text was refused; each names the field and the value at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// No `actions=` part.
    #[error("a rule needs actions= (output:PORT, drop or normal)")]
    NoActions,
    /// `actions=` with nothing after it.
    #[error("actions= is empty")]
    EmptyActions,
    /// `drop` beside other actions.
    #[error("drop cannot be combined with other actions")]
    DropCombined,
    /// A field's value that is not what the field takes.
    #[error("{field}: '{value}' is not {expected}")]
    Value {
        /// The match field (or action).
        field: String,
        /// What was given.
        value: String,
        /// What the field takes.
        expected: String,
    },
    /// A field given without a value.
    #[error("{field} needs a value")]
    NeedsValue {
        /// The match field.
        field: String,
    },
    /// A port name the switch does not have.
    #[error("{field}: no port named '{name}'")]
    NoPort {
        /// `in_port` or `output`.
        field: &'static str,
        /// The name given.
        name: String,
    },
    /// A match field no one knows.
    #[error("unknown match field '{0}'")]
    UnknownField(String),
    /// An action no one knows.
    #[error("unknown action '{0}' (output:PORT, drop, normal)")]
    UnknownAction(String),
    /// Fields whose protocol the rule does not name (OpenFlow's prerequisites).
    #[error("{fields} need {needs} in the same rule (as in OpenFlow)")]
    Prerequisite {
        /// The fields that need it.
        fields: &'static str,
        /// What they need.
        needs: &'static str,
    },
}

fn bad(field: &str, value: &str, expected: impl Into<String>) -> RuleError {
    RuleError::Value { field: field.into(), value: value.into(), expected: expected.into() }
}

fn parse_mac(s: &str, field: &str) -> Result<[u8; 6], RuleError> {
    let parts: Vec<&str> = s.split(':').collect();
    let not_mac = || bad(field, s, "a MAC address (xx:xx:xx:xx:xx:xx)");
    if parts.len() != 6 {
        return Err(not_mac());
    }
    let mut mac = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        mac[i] = u8::from_str_radix(p, 16).map_err(|_| not_mac())?;
    }
    Ok(mac)
}

fn parse_number(s: &str, what: &str, max: u64) -> Result<u64, RuleError> {
    let v = if let Some(hex) = s.strip_prefix("0x") { u64::from_str_radix(hex, 16) } else { s.parse::<u64>() };
    match v {
        Ok(v) if v <= max => Ok(v),
        _ => Err(bad(what, s, format!("a number from 0 to {max}"))),
    }
}

/// A transport port, or `port/mask` as OVS writes it (`tp_src=0x400/0xffc0`): the key is masked.
fn l4_port(s: &str, what: &str) -> Result<(u16, u16), RuleError> {
    let (port, mask) = match s.split_once('/') {
        Some((p, m)) => (parse_number(p, what, 65535)?, parse_number(m, what, 65535)?),
        None => (parse_number(s, what, 65535)?, 0xffff),
    };
    Ok(((port & mask) as u16, mask as u16))
}

fn split_prefix<'a>(s: &'a str, field: &str, total: u32) -> Result<(&'a str, u32), RuleError> {
    match s.split_once('/') {
        None => Ok((s, total)),
        Some((addr, bits)) => match bits.parse::<u32>() {
            Ok(bits) if bits <= total => Ok((addr, bits)),
            _ => Err(bad(field, s, format!("an address with a prefix length from 0 to {total}"))),
        },
    }
}

fn ip_field(value: &str, field: &str, v6: bool) -> Result<([u8; 16], [u8; 16]), RuleError> {
    let total = if v6 { 128 } else { 32 };
    let (addr, bits) = split_prefix(value, field, total)?;
    let mut ip = [0u8; 16];
    if v6 {
        let a: Ipv6Addr = addr.parse().map_err(|_| bad(field, addr, "an IPv6 address"))?;
        ip = a.octets();
    } else {
        let a: Ipv4Addr = addr.parse().map_err(|_| bad(field, addr, "an IPv4 address"))?;
        ip[..4].copy_from_slice(&a.octets());
    }
    let mask = crate::prefix_trie::prefix_mask(bits as usize);
    for i in 0..16 {
        ip[i] &= mask[i];
    }
    Ok((ip, mask))
}

impl Rule {
    /// Parses `ovs-ofctl`-style text. `resolve_port` turns a port name (or number) into its number.
    pub fn parse(text: &str, resolve_port: &dyn Fn(&str) -> Option<u16>) -> Result<Rule, RuleError> {
        let text = text.trim();
        let (match_part, actions_part) = match text.split_once("actions=") {
            Some((m, a)) => (m.trim_end_matches([',', ' ']), a),
            None => return Err(RuleError::NoActions),
        };
        let mut key = FlowKey::ZERO;
        let mut mask = FlowKey::ZERO;
        let mut priority = DEFAULT_PRIORITY;
        let port = |name: &str, field: &'static str| {
            resolve_port(name).ok_or_else(|| RuleError::NoPort { field, name: name.into() })
        };
        for item in match_part.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (field, value) = item.split_once('=').map_or((item, ""), |(f, v)| (f.trim(), v.trim()));
            let need = |v: &str| if v.is_empty() { Err(RuleError::NeedsValue { field: field.into() }) } else { Ok(()) };
            let set_type = |t: u16, proto: Option<u8>, key: &mut FlowKey, mask: &mut FlowKey| {
                key.set_eth_type(t);
                mask.set_eth_type(0xffff);
                if let Some(p) = proto {
                    key.set_ip_proto(p);
                    mask.set_ip_proto(0xff);
                }
            };
            match field {
                "priority" => priority = parse_number(value, "priority", 65535)? as u32,
                "in_port" => {
                    need(value)?;
                    key.set_in_port(port(value, "in_port")?);
                    mask.set_in_port(0xffff);
                }
                "dl_src" | "dl_dst" => {
                    need(value)?;
                    let (mac, m) = match value.split_once('/') {
                        Some((a, b)) => (parse_mac(a, field)?, parse_mac(b, field)?),
                        None => (parse_mac(value, field)?, [0xff; 6]),
                    };
                    let masked: [u8; 6] = std::array::from_fn(|i| mac[i] & m[i]);
                    if field == "dl_src" {
                        key.set_eth_src(masked);
                        mask.set_eth_src(m);
                    } else {
                        key.set_eth_dst(masked);
                        mask.set_eth_dst(m);
                    }
                }
                "dl_type" => {
                    key.set_eth_type(parse_number(value, "dl_type", 0xffff)? as u16);
                    mask.set_eth_type(0xffff);
                }
                "dl_vlan" => {
                    let vid = parse_number(value, "dl_vlan", 4095)? as u16;
                    key.set_vlan_tci(vid | VLAN_PRESENT);
                    mask.set_vlan_tci(0x0fff | VLAN_PRESENT);
                }
                "ip" => set_type(ETH_TYPE_IPV4, None, &mut key, &mut mask),
                "ipv6" => set_type(ETH_TYPE_IPV6, None, &mut key, &mut mask),
                "arp" => set_type(0x0806, None, &mut key, &mut mask),
                "tcp" => set_type(ETH_TYPE_IPV4, Some(IP_PROTO_TCP), &mut key, &mut mask),
                "udp" => set_type(ETH_TYPE_IPV4, Some(IP_PROTO_UDP), &mut key, &mut mask),
                "icmp" => set_type(ETH_TYPE_IPV4, Some(IP_PROTO_ICMP), &mut key, &mut mask),
                "tcp6" => set_type(ETH_TYPE_IPV6, Some(IP_PROTO_TCP), &mut key, &mut mask),
                "udp6" => set_type(ETH_TYPE_IPV6, Some(IP_PROTO_UDP), &mut key, &mut mask),
                "nw_src" | "nw_dst" | "ipv6_src" | "ipv6_dst" => {
                    need(value)?;
                    let v6 = field.starts_with("ipv6");
                    let (ip, m) = ip_field(value, field, v6)?;
                    if field.ends_with("src") {
                        key.set_ip_src(ip);
                        mask.set_ip_src(m);
                    } else {
                        key.set_ip_dst(ip);
                        mask.set_ip_dst(m);
                    }
                }
                "nw_proto" => {
                    key.set_ip_proto(parse_number(value, "nw_proto", 255)? as u8);
                    mask.set_ip_proto(0xff);
                }
                "tp_src" => {
                    let (port, m) = l4_port(value, "tp_src")?;
                    key.set_l4_src(port);
                    mask.set_l4_src(m);
                }
                "tp_dst" => {
                    let (port, m) = l4_port(value, "tp_dst")?;
                    key.set_l4_dst(port);
                    mask.set_l4_dst(m);
                }
                other => return Err(RuleError::UnknownField(other.into())),
            }
        }
        if (mask.ip_src() != [0; 16] || mask.ip_dst() != [0; 16] || mask.ip_proto() != 0) && mask.eth_type() == 0 {
            return Err(RuleError::Prerequisite { fields: "IP fields", needs: "ip, ipv6, tcp, udp or dl_type=" });
        }
        if (mask.l4_src() != 0 || mask.l4_dst() != 0) && mask.ip_proto() == 0 {
            return Err(RuleError::Prerequisite { fields: "tp_src/tp_dst", needs: "tcp, udp or nw_proto=" });
        }
        let mut actions = Vec::new();
        for a in actions_part.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            actions.push(match a {
                "drop" => Action::Drop,
                "normal" | "NORMAL" => Action::Normal,
                _ => match a.strip_prefix("output:") {
                    Some(p) => Action::Output(port(p, "output")?),
                    None => return Err(RuleError::UnknownAction(a.into())),
                },
            });
        }
        if actions.is_empty() {
            return Err(RuleError::EmptyActions);
        }
        if actions.contains(&Action::Drop) && actions.len() > 1 {
            return Err(RuleError::DropCombined);
        }
        Ok(Rule { priority, matcher: Match { key, mask }, actions })
    }

    /// The rule as text (`dump-flows`), with port numbers shown through `port_name`.
    pub fn to_text(&self, port_name: &dyn Fn(u16) -> String) -> String {
        let mut parts = vec![format!("priority={}", self.priority)];
        let (k, m) = (&self.matcher.key, &self.matcher.mask);
        if m.in_port() != 0 {
            parts.push(format!("in_port={}", port_name(k.in_port())));
        }
        let mac = |a: [u8; 6]| a.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
        if m.eth_src() != [0; 6] {
            parts.push(if m.eth_src() == [0xff; 6] {
                format!("dl_src={}", mac(k.eth_src()))
            } else {
                format!("dl_src={}/{}", mac(k.eth_src()), mac(m.eth_src()))
            });
        }
        if m.eth_dst() != [0; 6] {
            parts.push(if m.eth_dst() == [0xff; 6] {
                format!("dl_dst={}", mac(k.eth_dst()))
            } else {
                format!("dl_dst={}/{}", mac(k.eth_dst()), mac(m.eth_dst()))
            });
        }
        if m.vlan_tci() != 0 {
            parts.push(format!("dl_vlan={}", k.vlan_tci() & 0x0fff));
        }
        if m.eth_type() != 0 {
            parts.push(format!("dl_type=0x{:04x}", k.eth_type()));
        }
        if m.ip_proto() != 0 {
            parts.push(format!("nw_proto={}", k.ip_proto()));
        }
        let v6 = k.eth_type() == ETH_TYPE_IPV6;
        for (name, ip, mk) in [("src", k.ip_src(), m.ip_src()), ("dst", k.ip_dst(), m.ip_dst())] {
            if mk == [0; 16] {
                continue;
            }
            let bits: u32 = mk.iter().map(|b| b.count_ones()).sum();
            if v6 {
                parts.push(format!("ipv6_{name}={}/{bits}", Ipv6Addr::from(ip)));
            } else {
                parts.push(format!("nw_{name}={}/{bits}", Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3])));
            }
        }
        let port = |p: u16, m: u16| if m == 0xffff { p.to_string() } else { format!("{p:#x}/{m:#x}") };
        if m.l4_src() != 0 {
            parts.push(format!("tp_src={}", port(k.l4_src(), m.l4_src())));
        }
        if m.l4_dst() != 0 {
            parts.push(format!("tp_dst={}", port(k.l4_dst(), m.l4_dst())));
        }
        let actions: Vec<String> = self
            .actions
            .iter()
            .map(|a| match a {
                Action::Output(p) => format!("output:{}", port_name(*p)),
                Action::Drop => "drop".into(),
                Action::Normal => "normal".into(),
            })
            .collect();
        format!("{},actions={}", parts.join(","), actions.join(","))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text(&|p| p.to_string()))
    }
}
