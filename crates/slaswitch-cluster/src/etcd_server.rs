//! A private etcd (Debian's `etcd-server`) on loopback, for the tests and for the scale
//! experiment when no cluster is given; with TLS, a CA of its own that signs etcd's server
//! certificate and one client certificate, and etcd checks its clients. Stopped, and its data
//! removed, when dropped.

use crate::etcd::EtcdTls;
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
    /// With TLS: what a client needs (the CA, and a certificate etcd accepts).
    pub tls: Option<EtcdTls>,
}

/// How many times a start is tried again on fresh ports after etcd exited at once.
const PORT_TRIES: usize = 3;

/// A loopback port nobody listens on now.
fn free_port() -> Result<u16, ClusterError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(ClusterError::io("no free port"))?;
    l.local_addr().map(|a| a.port()).map_err(ClusterError::io("no free port"))
}

impl EtcdServer {
    /// Starts etcd with its data in `dir` (created; removed on drop).
    pub fn start(dir: &Path) -> Result<EtcdServer, ClusterError> {
        EtcdServer::start_with(dir, false)
    }

    /// Starts etcd serving TLS only, checking its clients' certificates, with a CA made for it.
    pub fn start_tls(dir: &Path) -> Result<EtcdServer, ClusterError> {
        EtcdServer::start_with(dir, true)
    }

    fn start_with(dir: &Path, tls: bool) -> Result<EtcdServer, ClusterError> {
        let mut s = EtcdServer { child: None, dir: dir.to_path_buf(), client_port: 0, peer_port: 0, tls: None };
        std::fs::create_dir_all(dir).map_err(ClusterError::io(format!("cannot create {}", dir.display())))?;
        if tls {
            s.tls = Some(make_certificates(dir)?);
        }
        // A port found free may be taken by another process (a test beside this one) before
        // etcd binds it; etcd then exits, and fresh ports are tried.
        let mut tries = 0;
        loop {
            (s.client_port, s.peer_port) = (free_port()?, free_port()?);
            match s.spawn() {
                Err(ClusterError::EtcdExited(_)) if tries < PORT_TRIES => tries += 1,
                result => return result.map(|()| s),
            }
        }
    }

    /// The client URL.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self) -> Result<(), ClusterError> {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log_from = std::fs::metadata(self.dir.join("etcd.log")).map_or(0, |m| m.len() as usize);
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
            // Old revisions go after a minute, as a production etcd's should: every usage
            // report written and deleted would otherwise stay in its index.
            .args(["--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1m"])
            .args(self.tls_args())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(ClusterError::io("cannot start etcd (apt-get install etcd-server)"))?;
        self.child = Some(child);
        let t = Instant::now();
        // Up when this etcd says it serves on its port (a listener there may be another
        // process's) and the port takes a connection.
        let serving = format!("client requests on 127.0.0.1:{}", self.client_port);
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(ClusterError::EtcdExited(format!("{status}: {}", self.log())));
            }
            let said = std::fs::read(self.dir.join("etcd.log")).is_ok_and(|log| {
                log.get(log_from..).is_some_and(|new| String::from_utf8_lossy(new).contains(&serving))
            });
            if said && TcpStream::connect(("127.0.0.1", self.client_port)).is_ok() {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(20) {
                return Err(ClusterError::EtcdDown(self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn tls_args(&self) -> Vec<String> {
        if self.tls.is_none() {
            return Vec::new();
        }
        let file = |name: &str| self.dir.join(name).display().to_string();
        vec![
            "--cert-file".into(),
            file(SERVER_CERT),
            "--key-file".into(),
            file(SERVER_KEY),
            "--trusted-ca-file".into(),
            file(CA_CERT),
            "--client-cert-auth".into(),
        ]
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

const CA_CERT: &str = "ca.pem";
const SERVER_CERT: &str = "server.pem";
const SERVER_KEY: &str = "server-key.pem";
const CLIENT_CERT: &str = "client.pem";
const CLIENT_KEY: &str = "client-key.pem";

/// A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, as PEM
/// files in `dir`.
fn make_certificates(dir: &Path) -> Result<EtcdTls, ClusterError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
    let failed = |cause: rcgen::Error| ClusterError::Tls(format!("cannot make the test CA: {cause}"));
    let ca_key = KeyPair::generate().map_err(failed)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "slaswitch test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).map_err(failed)?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(ClusterError::io(format!("cannot write {}", path.display())))?;
        Ok::<PathBuf, ClusterError>(path)
    };
    let leaf = |name: &str, sans: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().map_err(failed)?;
        let mut p = CertificateParams::new(sans).map_err(failed)?;
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &ca_cert, &ca_key).map_err(failed)?;
        Ok::<(String, String), ClusterError>((cert.pem(), key.serialize_pem()))
    };
    let (server_cert, server_key) =
        leaf("etcd", vec!["127.0.0.1".into(), "localhost".into()], ExtendedKeyUsagePurpose::ServerAuth)?;
    let (client_cert, client_key) = leaf("slaswitch", Vec::new(), ExtendedKeyUsagePurpose::ClientAuth)?;
    write(SERVER_CERT, server_cert)?;
    write(SERVER_KEY, server_key)?;
    Ok(EtcdTls {
        ca: write(CA_CERT, ca_cert.pem())?,
        identity: Some((write(CLIENT_CERT, client_cert)?, write(CLIENT_KEY, client_key)?)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second etcd told to serve on a port the first one holds exits, and is not taken for
    /// up because that port answers.
    #[test]
    fn an_etcd_whose_port_is_taken_is_not_mistaken_for_up() {
        if !slaswitch_testkit::require(&[slaswitch_testkit::Component::Etcd]) {
            return;
        }
        let base = std::env::temp_dir().join(format!("slaswitch-etcd-ports-{}", std::process::id()));
        let first = EtcdServer::start(&base.join("first")).expect("etcd");
        let dir = base.join("second");
        std::fs::create_dir_all(&dir).unwrap();
        let mut second =
            EtcdServer { child: None, dir, client_port: first.client_port, peer_port: free_port().unwrap(), tls: None };
        let result = second.spawn();
        assert!(matches!(result, Err(ClusterError::EtcdExited(_))), "{:?}", result.err());
        drop(first);
        let _ = std::fs::remove_dir_all(&base);
    }
}
