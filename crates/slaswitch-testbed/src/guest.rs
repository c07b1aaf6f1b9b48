//! QEMU guests: real Linux VMs (Debian 12's kernel with its virtio-net driver) on a vhost-user
//! port, built by `scripts/guest-image`. The guest runs the test bed's commands through a small
//! agent in its init: the host writes `ID COMMAND` lines to a virtio-serial port, and the guest
//! writes each command's output and exit status to a 9p share the host reads as files.
//!
//! KVM where the CPU has hardware virtualization; TCG otherwise (a PVM `/dev/kvm`, as on the
//! cloud hosts this project measures on, cannot boot a stock kernel).

use anyhow::anyhow;
use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cleanup;

/// The QEMU binary (Debian's `qemu-system-x86`).
pub const QEMU: &str = "qemu-system-x86_64";

/// The guest's memory, shared with the switch (vhost-user maps it).
const MEMORY_MIB: u32 = 256;

/// Where `scripts/guest-image` puts the kernel and the initramfs.
pub fn image_dir() -> PathBuf {
    std::env::var_os("SLASWITCH_GUEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/slaswitch/guest"))
}

/// The kernel and initramfs to boot, or an error saying how to build them.
pub fn image() -> anyhow::Result<(PathBuf, PathBuf)> {
    let dir = image_dir();
    let (kernel, initrd) = (dir.join("vmlinuz"), dir.join("initrd.img"));
    if !kernel.exists() || !initrd.exists() {
        return Err(anyhow!("no guest image in {}: build it with scripts/guest-image", dir.display()));
    }
    Ok((kernel, initrd))
}

/// How QEMU runs the guest's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualization.
    Kvm,
    /// QEMU's own translator: slow (a few hundred Mbit/s of TCP), but boots anywhere.
    Tcg,
}

impl Accel {
    /// KVM when the CPU shows `vmx` or `svm` and `/dev/kvm` opens; TCG otherwise.
    pub fn detect() -> Accel {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let hardware = cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        let kvm = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
        if hardware && kvm {
            Accel::Kvm
        } else {
            Accel::Tcg
        }
    }

    /// `kvm` or `tcg`, as QEMU and the reports name it.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// One guest's settings.
#[derive(Clone, Debug)]
pub struct GuestConfig {
    /// The VM's name.
    pub name: String,
    /// Its MAC address (the switch's rules and MAC learning see it).
    pub mac: String,
    /// Its eth0 address with prefix length (`10.77.0.10/24`).
    pub ip_cidr: String,
    /// The vhost-user socket.
    pub vhost_socket: PathBuf,
    /// True when QEMU serves the socket and the switch connects (a `vhost-user-client` port).
    pub guest_serves: bool,
    /// The core the guest's vCPU runs on.
    pub core: usize,
    /// Its working folder: the 9p share, the agent's socket, the console log.
    pub dir: PathBuf,
    /// The virtio-net device offers the guest large receive segments (`guest_tso4/6`, QEMU's
    /// default); false makes a guest that takes only whole frames, which the switch must cut
    /// segments for.
    pub receive_tso: bool,
}

/// QEMU's command line for `cfg`.
pub fn qemu_args(cfg: &GuestConfig, kernel: &Path, initrd: &Path, accel: Accel) -> Vec<String> {
    let share = cfg.dir.join("share");
    let vhost = format!(
        "socket,id=net0,path={}{}",
        cfg.vhost_socket.display(),
        if cfg.guest_serves { ",server=on,wait=off" } else { ",reconnect=1" }
    );
    // QEMU 7.2 under TCG crashes setting up MSI-X vector notifiers when a vhost-user
    // virtio-net device starts; without MSI-X vectors the device uses INTx.
    let vectors = if accel == Accel::Tcg { ",vectors=0" } else { "" };
    let receive = if cfg.receive_tso { "" } else { ",guest_tso4=off,guest_tso6=off" };
    let cpu = if accel == Accel::Kvm { "host" } else { "max" };
    let args = [
        "taskset".into(),
        "-c".into(),
        cfg.core.to_string(),
        QEMU.into(),
        "-name".into(),
        cfg.name.clone(),
        "-accel".into(),
        accel.name().into(),
        "-cpu".into(),
        cpu.into(),
        "-m".into(),
        MEMORY_MIB.to_string(),
        "-smp".into(),
        "1".into(),
        "-nodefaults".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-kernel".into(),
        kernel.display().to_string(),
        "-initrd".into(),
        initrd.display().to_string(),
        "-append".into(),
        format!("console=ttyS0 quiet panic=-1 slaswitch.ip={}", cfg.ip_cidr),
        "-object".into(),
        format!("memory-backend-memfd,id=mem,size={MEMORY_MIB}M,share=on"),
        "-machine".into(),
        "q35,memory-backend=mem".into(),
        "-chardev".into(),
        vhost,
        "-netdev".into(),
        "vhost-user,id=n0,chardev=net0".into(),
        "-device".into(),
        format!("virtio-net-pci,netdev=n0,mac={}{vectors}{receive}", cfg.mac),
        "-virtfs".into(),
        format!("local,path={},mount_tag=slaswitch,security_model=none,id=fs0", share.display()),
        "-device".into(),
        "virtio-serial-pci".into(),
        "-chardev".into(),
        format!("socket,id=agent,path={},server=on,wait=off", cfg.dir.join("agent.sock").display()),
        "-device".into(),
        "virtserialport,chardev=agent,name=slaswitch.agent".into(),
        "-serial".into(),
        format!("file:{}", cfg.dir.join("console.log").display()),
    ];
    args.to_vec()
}

/// A running guest.
pub struct Guest {
    /// Its name.
    pub name: String,
    /// How its CPU runs.
    pub accel: Accel,
    child: Child,
    dir: PathBuf,
    agent: Option<UnixStream>,
    next_id: u64,
}

impl Guest {
    /// Starts QEMU for `cfg` in a process group of its own; dropping the guest ends it.
    pub fn boot(cfg: &GuestConfig) -> anyhow::Result<Guest> {
        let (kernel, initrd) = image()?;
        let accel = Accel::detect();
        std::fs::create_dir_all(cfg.dir.join("share"))?;
        let args = qemu_args(cfg, &kernel, &initrd, accel);
        let log = std::fs::File::create(cfg.dir.join("qemu.log"))?;
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow!("cannot start {QEMU} for {}: {e}", cfg.name))?;
        Ok(Guest { name: cfg.name.clone(), accel, child, dir: cfg.dir.clone(), agent: None, next_id: 0 })
    }

    /// Waits until the guest's agent is up (network configured, share mounted); returns what
    /// it reported (kernel, offloads), or an error with the end of its console and QEMU's log.
    pub fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        let ready = self.dir.join("share").join("ready");
        while !ready.exists() {
            if let Some(status) = self.child.try_wait()? {
                return Err(anyhow!("guest {} ended ({status}) before it was ready: {}", self.name, self.logs()));
            }
            if Instant::now() > deadline {
                return Err(anyhow!("guest {} not ready after {timeout:?}: {}", self.name, self.logs()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // The agent reads the port only while a host program holds its socket.
        self.agent = Some(
            UnixStream::connect(self.dir.join("agent.sock"))
                .map_err(|e| anyhow!("guest {}: the agent's socket: {e}", self.name))?,
        );
        Ok(std::fs::read_to_string(&ready).unwrap_or_default())
    }

    fn logs(&self) -> String {
        let tail = |f: &str| {
            let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            text.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ")
        };
        format!("console: {}; qemu: {}", tail("console.log"), tail("qemu.log"))
    }

    /// Runs `command` with the guest's `sh`; its output goes to the returned job's file.
    pub fn start(&mut self, command: &str) -> anyhow::Result<GuestJob> {
        let agent = self.agent.as_mut().ok_or_else(|| anyhow!("guest {} is not ready", self.name))?;
        self.next_id += 1;
        let id = self.next_id;
        let line = command.replace('\n', " ");
        agent.write_all(format!("{id} {line}\n").as_bytes()).map_err(|e| anyhow!("guest {}: {e}", self.name))?;
        let jobs = self.dir.join("share").join("jobs");
        Ok(GuestJob {
            id,
            agent: agent.try_clone()?,
            output: jobs.join(format!("{id}.out")),
            status: jobs.join(format!("{id}.rc")),
        })
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        cleanup::stop_group(self.child.id() as i32, Duration::from_secs(2));
        let _ = self.child.wait();
    }
}

/// A command running in a guest.
pub struct GuestJob {
    id: u64,
    agent: UnixStream,
    /// Its output, as the guest writes it.
    pub output: PathBuf,
    status: PathBuf,
}

impl GuestJob {
    /// True once the command has ended.
    pub fn finished(&self) -> bool {
        self.status.exists()
    }

    /// The command's exit status, once it has ended.
    pub fn exit_status(&self) -> Option<i32> {
        std::fs::read_to_string(&self.status).ok().and_then(|s| s.trim().parse().ok())
    }

    /// Waits up to `timeout` for the command to end; returns its exit status and output.
    pub fn wait(&self, timeout: Duration) -> anyhow::Result<(i32, String)> {
        let deadline = Instant::now() + timeout;
        while !self.finished() {
            if Instant::now() > deadline {
                return Err(anyhow!("command {} still running after {timeout:?}", self.id));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let output = std::fs::read_to_string(&self.output).unwrap_or_default();
        Ok((self.exit_status().unwrap_or(-1), output))
    }

    /// Asks the guest to end the command (SIGTERM to its process group) and waits up to
    /// `grace` for it.
    pub fn stop(&mut self, grace: Duration) {
        if self.finished() {
            return;
        }
        let _ = self.agent.write_all(format!("kill {}\n", self.id).as_bytes());
        let deadline = Instant::now() + grace;
        while !self.finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(guest_serves: bool) -> GuestConfig {
        GuestConfig {
            name: "vm1".into(),
            mac: "52:54:00:00:00:01".into(),
            ip_cidr: "10.77.0.10/24".into(),
            vhost_socket: "/run/x/vm1.sock".into(),
            guest_serves,
            core: 1,
            dir: "/tmp/g".into(),
            receive_tso: true,
        }
    }

    #[test]
    fn the_guest_runs_on_the_vm_core_with_shared_memory_for_vhost_user() {
        let args = qemu_args(&config(false), Path::new("/k"), Path::new("/i"), Accel::Tcg);
        assert_eq!(&args[..3], &["taskset", "-c", "1"]);
        assert!(args.iter().any(|a| a.starts_with("memory-backend-memfd") && a.ends_with("share=on")));
        assert!(args.contains(&"socket,id=net0,path=/run/x/vm1.sock,reconnect=1".to_string()));
        assert!(args.contains(&"virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01,vectors=0".to_string()));
        assert!(args.iter().any(|a| a.ends_with("slaswitch.ip=10.77.0.10/24")));
    }

    #[test]
    fn a_guest_serving_its_socket_waits_for_the_switch_and_kvm_keeps_msix() {
        let args = qemu_args(&config(true), Path::new("/k"), Path::new("/i"), Accel::Kvm);
        assert!(args.contains(&"socket,id=net0,path=/run/x/vm1.sock,server=on,wait=off".to_string()));
        assert!(args.contains(&"virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01".to_string()));
        assert!(args.contains(&"host".to_string()));
    }
}
