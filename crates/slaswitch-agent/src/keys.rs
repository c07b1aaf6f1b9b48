//! Where everything lives in etcd. One prefix per cluster; under it:
//!
//! | key                                   | written by | lease | value                         |
//! |---------------------------------------|------------|-------|-------------------------------|
//! | `requests/VM`                         | operator   | no    | [`PurchaseRequest`], answered |
//! | `vms/VM`                              | master     | no    | [`Purchase`]: what was bought |
//! | `hosts/HOST/alive`                    | agent      | yes   | [`HostInfo`]                  |
//! | `hosts/HOST/ports/VM`                 | agent      | yes   | the port is there (Sec. 4.1)  |
//! | `hosts/HOST/guarantees/VM`            | master     | no    | [`Enforcement`]: what to set  |
//! | `hosts/HOST/status/VM`                | agent      | yes   | [`Status`]: applied/refused   |
//! | `hosts/HOST/load`                     | master     | no    | [`HostLoadView`]: δ, failure  |
//! | `usage/HOST/CYCLE`                    | agent      | no    | [`UsageReport`], until billed |
//!
//! Keys under a host's lease vanish when its switch stops renewing it, which is how the master
//! sees a dead host. Usage reports carry no lease: a report of a host that died is still billed.
//!
//! [`Purchase`]: crate::purchase::Purchase
//! [`PurchaseRequest`]: crate::purchase::PurchaseRequest
//! [`HostLoadView`]: crate::purchase::HostLoadView
//! [`Enforcement`]: crate::purchase::Enforcement
//! [`Status`]: crate::purchase::Status
//! [`HostInfo`]: crate::purchase::HostInfo
//! [`UsageReport`]: crate::usage::UsageReport

/// The default prefix.
pub const DEFAULT_PREFIX: &str = "/slaswitch";

/// The key layout under one prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The layout under `prefix` (no trailing slash needed).
    pub fn new(prefix: &str) -> Keys {
        Keys { prefix: prefix.trim_end_matches('/').to_string() }
    }

    /// Every purchase.
    pub fn vms(&self) -> String {
        format!("{}/vms/", self.prefix)
    }
    /// One VM's purchase.
    pub fn vm(&self, vm: &str) -> String {
        format!("{}{vm}", self.vms())
    }
    /// Every purchase waiting for (or answered by) the master.
    pub fn requests(&self) -> String {
        format!("{}/requests/", self.prefix)
    }
    /// One VM's request.
    pub fn request(&self, vm: &str) -> String {
        format!("{}{vm}", self.requests())
    }
    /// The parts of the key of a request.
    pub fn parse_request_key<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.requests().as_str()).filter(|v| !v.is_empty())
    }
    /// A host's over-commitment as the master sees it.
    pub fn load(&self, host: &str) -> String {
        format!("{}load", self.host(host))
    }
    /// Every host's keys.
    pub fn hosts(&self) -> String {
        format!("{}/hosts/", self.prefix)
    }
    /// One host's keys.
    pub fn host(&self, host: &str) -> String {
        format!("{}{host}/", self.hosts())
    }
    /// A host's liveness key.
    pub fn alive(&self, host: &str) -> String {
        format!("{}alive", self.host(host))
    }
    /// A host's announced ports.
    pub fn ports(&self, host: &str) -> String {
        format!("{}ports/", self.host(host))
    }
    /// One announced port.
    pub fn port(&self, host: &str, vm: &str) -> String {
        format!("{}{vm}", self.ports(host))
    }
    /// What a host must enforce.
    pub fn guarantees(&self, host: &str) -> String {
        format!("{}guarantees/", self.host(host))
    }
    /// One VM's enforcement on a host.
    pub fn guarantee(&self, host: &str, vm: &str) -> String {
        format!("{}{vm}", self.guarantees(host))
    }
    /// A host's answers.
    pub fn statuses(&self, host: &str) -> String {
        format!("{}status/", self.host(host))
    }
    /// One VM's answer on a host.
    pub fn status(&self, host: &str, vm: &str) -> String {
        format!("{}{vm}", self.statuses(host))
    }
    /// Every usage report waiting to be billed.
    pub fn usage(&self) -> String {
        format!("{}/usage/", self.prefix)
    }
    /// One host's report of one billing cycle (zero-padded, so keys sort by cycle).
    pub fn usage_report(&self, host: &str, cycle: u64) -> String {
        format!("{}{host}/{cycle:012}", self.usage())
    }

    /// `hosts/HOST/KIND/NAME` split into (HOST, KIND, NAME); `alive` gives an empty NAME.
    pub fn parse_host_key<'a>(&self, key: &'a str) -> Option<(&'a str, &'a str, &'a str)> {
        let rest = key.strip_prefix(self.hosts().as_str())?;
        let (host, rest) = rest.split_once('/')?;
        match rest.split_once('/') {
            Some((kind, name)) => Some((host, kind, name)),
            None => Some((host, rest, "")),
        }
    }

    /// The VM of a purchase key.
    pub fn parse_vm_key<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.vms().as_str()).filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_keys_split_back_into_their_parts() {
        let k = Keys::new("/c1/");
        assert_eq!(k.parse_host_key(&k.port("h1", "vm1")), Some(("h1", "ports", "vm1")));
        assert_eq!(k.parse_host_key(&k.alive("h1")), Some(("h1", "alive", "")));
        assert_eq!(k.parse_host_key(&k.status("h-2", "vm9")), Some(("h-2", "status", "vm9")));
        assert_eq!(k.parse_host_key("/other/hosts/h1/alive"), None);
        assert_eq!(k.parse_vm_key(&k.vm("web1")), Some("web1"));
    }

    #[test]
    fn usage_keys_sort_by_cycle() {
        let k = Keys::new(DEFAULT_PREFIX);
        assert!(k.usage_report("h", 999) < k.usage_report("h", 1000));
    }
}
