//! One rule for tests that need a real component of the machine.
//!
//! A test calls [`require`] with what it needs. Present: it runs. Missing: under `CI=true` the
//! test fails naming each missing component and how to get it, so a CI run never passes without
//! running its data-plane tests; elsewhere the test returns early and the skip is written past
//! the test harness's output capture (so a person sees it even though cargo says "ok") and
//! appended to `$SLASWITCH_SKIP_LOG`, which `scripts/test` counts at its end.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// A real component a test may need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// Root: DPDK, namespaces, a PostgreSQL server run as its own user.
    Root,
    /// Reserved 2 MiB hugepages and a hugetlbfs mounted at `/dev/hugepages`.
    Hugepages,
    /// DPDK 22.11's libraries (Debian's `libdpdk-dev`).
    Dpdk,
    /// Network namespaces (`ip netns`), root included.
    Namespaces,
    Iperf3,
    Qperf,
    Etcd,
    /// PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`).
    Postgres,
    /// QEMU (`qemu-system-x86_64`), for real guests.
    Qemu,
}

impl Component {
    /// The name a message uses.
    pub fn name(self) -> &'static str {
        match self {
            Component::Root => "root",
            Component::Hugepages => "hugepages",
            Component::Dpdk => "DPDK",
            Component::Namespaces => "network namespaces",
            Component::Iperf3 => "iperf3",
            Component::Qperf => "qperf",
            Component::Etcd => "etcd",
            Component::Postgres => "PostgreSQL",
            Component::Qemu => "QEMU",
        }
    }

    /// How to get it.
    pub fn hint(self) -> &'static str {
        match self {
            Component::Root => "run the tests as root",
            Component::Hugepages => "scripts/hugepages reserves and mounts them",
            Component::Dpdk => "scripts/install-deps installs libdpdk-dev",
            Component::Namespaces => "needs root and iproute2 (scripts/install-deps)",
            Component::Iperf3 => "scripts/install-deps installs iperf3",
            Component::Qperf => "scripts/install-deps --link installs qperf",
            Component::Etcd => "scripts/install-deps installs etcd-server",
            Component::Postgres => "scripts/install-deps installs postgresql",
            Component::Qemu => "scripts/install-deps --guests installs qemu-system-x86",
        }
    }

    /// Whether this machine has it now.
    pub fn present(self) -> bool {
        match self {
            Component::Root => is_root(),
            Component::Hugepages => hugepages_ready(),
            Component::Dpdk => succeeds("pkg-config", &["--exists", "libdpdk"]),
            Component::Namespaces => is_root() && succeeds("ip", &["netns", "list"]),
            Component::Iperf3 => succeeds("iperf3", &["--version"]),
            Component::Qperf => on_path("qperf"),
            Component::Etcd => succeeds("etcd", &["--version"]),
            Component::Postgres => postgres_bin().is_some(),
            Component::Qemu => on_path("qemu-system-x86_64"),
        }
    }
}

/// The directory of PostgreSQL's server binaries, the newest installed major version.
pub fn postgres_bin() -> Option<std::path::PathBuf> {
    let mut bins: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|d| d.path().join("bin"))
        .filter(|b| b.join("initdb").exists())
        .collect();
    bins.sort();
    bins.pop()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Pages reserved, and the mount that is on top at `/dev/hugepages` is a hugetlbfs (a tmpfs
/// mounted over it hides the pages from DPDK as surely as no mount at all).
fn hugepages_ready() -> bool {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("HugePages_Total:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let top = mounts.lines().rfind(|l| l.split_whitespace().nth(1) == Some("/dev/hugepages"));
    total > 0 && top.is_some_and(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
}

/// True when every component is here. Otherwise: under `CI=true` it panics naming what is
/// missing; elsewhere it reports the skip where a person sees it and returns false, and the
/// test returns early.
pub fn require(components: &[Component]) -> bool {
    let missing: Vec<Component> = components.iter().copied().filter(|c| !c.present()).collect();
    let Some(what) = describe(&missing) else { return true };
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{}", ci_failure(&test, &what));
    }
    skipped(&test, &what);
    false
}

/// What is missing and how to get it; `None` when nothing is.
fn describe(missing: &[Component]) -> Option<String> {
    (!missing.is_empty())
        .then(|| missing.iter().map(|c| format!("{} ({})", c.name(), c.hint())).collect::<Vec<_>>().join(", "))
}

fn ci_failure(test: &str, what: &str) -> String {
    format!("{test}: missing {what}; under CI=true a test whose component is missing fails")
}

/// Records a skip: on the process's stderr itself (the harness captures only `eprintln!`) and
/// in `$SLASWITCH_SKIP_LOG` when set.
fn skipped(test: &str, what: &str) {
    let line = format!("SKIPPED {test}: missing {what}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os("SLASWITCH_SKIP_LOG") {
        let log = Path::new(&log);
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_component_has_a_name_and_a_hint() {
        for c in [
            Component::Root,
            Component::Hugepages,
            Component::Dpdk,
            Component::Namespaces,
            Component::Iperf3,
            Component::Qperf,
            Component::Etcd,
            Component::Postgres,
        ] {
            assert!(!c.name().is_empty() && !c.hint().is_empty(), "{c:?}");
        }
    }

    #[test]
    fn nothing_required_runs() {
        assert!(require(&[]));
        assert_eq!(describe(&[]), None);
    }

    #[test]
    fn a_missing_component_is_named_with_how_to_get_it() {
        let what = describe(&[Component::Hugepages, Component::Etcd]).unwrap();
        assert_eq!(
            what,
            "hugepages (scripts/hugepages reserves and mounts them), etcd (scripts/install-deps installs etcd-server)"
        );
        let failure = ci_failure("t", &what);
        assert!(failure.starts_with("t: missing hugepages") && failure.contains("CI=true"), "{failure}");
    }
}
