//! A private etcd (Debian's `etcd-server`) on loopback, for the tests and for the scale
//! experiment when no cluster is given. Stopped, and its data removed, when dropped.

use crate::ClusterError;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running etcd.
pub struct EtcdServer {
    child: Option<Child>,
    dir: PathBuf,
    /// Its client port on 127.0.0.1.
    pub client_port: u16,
    peer_port: u16,
}

/// A loopback port nobody listens on now.
fn free_port() -> Result<u16, ClusterError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(ClusterError::io("no free port"))?;
    l.local_addr().map(|a| a.port()).map_err(ClusterError::io("no free port"))
}

impl EtcdServer {
    /// Starts etcd with its data in `dir` (created; removed on drop).
    pub fn start(dir: &Path) -> Result<EtcdServer, ClusterError> {
        let mut s =
            EtcdServer { child: None, dir: dir.to_path_buf(), client_port: free_port()?, peer_port: free_port()? };
        std::fs::create_dir_all(dir).map_err(ClusterError::io(format!("cannot create {}", dir.display())))?;
        s.spawn()?;
        Ok(s)
    }

    /// The client URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self) -> Result<(), ClusterError> {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .map_err(ClusterError::io("etcd.log"))?;
        let child = Command::new("etcd")
            .args(["--name", "slaswitch-test", "--data-dir"])
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("slaswitch-test={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(ClusterError::io("cannot start etcd (apt-get install etcd-server)"))?;
        self.child = Some(child);
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.client_port)).is_err() {
            if t.elapsed() > Duration::from_secs(20) {
                return Err(ClusterError::EtcdDown(self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }

    /// Kills it (its data stays, as after a crash).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same ports and data.
    pub fn restart(&mut self) -> Result<(), ClusterError> {
        self.kill();
        self.spawn()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
