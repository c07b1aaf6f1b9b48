//! Connecting to etcd, the same way everywhere: bounded connect and request times, so a dead
//! etcd is noticed in seconds, not minutes; TLS with a client certificate when given.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, KeyValue, TlsOptions};

use crate::FleetError;

/// An etcd error, as the fleet's.
pub fn e(cause: etcd_client::Error) -> FleetError {
    FleetError::Etcd { cause }
}

/// TLS to etcd: the CA that signed etcd's server certificate and, for a cluster that checks
/// its clients (`--client-cert-auth`), this client's certificate and key. PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA certificate.
    pub ca: PathBuf,
    /// This client's certificate and key, if etcd asks for them.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl EtcdTls {
    /// From the three options (`--etcd-ca`, `--etcd-cert`, `--etcd-key`): none, the CA alone,
    /// or all three; anything else is refused naming what is missing.
    pub fn from_options(
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Option<EtcdTls>, FleetError> {
        match (ca, cert, key) {
            (None, None, None) => Ok(None),
            (Some(ca), None, None) => Ok(Some(EtcdTls { ca, identity: None })),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(EtcdTls { ca, identity: Some((cert, key)) })),
            (None, ..) => {
                Err(FleetError::Tls("--etcd-cert and --etcd-key need --etcd-ca (the CA of etcd's server)".into()))
            }
            _ => Err(FleetError::Tls("give --etcd-cert and --etcd-key together".into())),
        }
    }

    fn options(&self) -> Result<TlsOptions, FleetError> {
        let read = |p: &PathBuf| {
            std::fs::read(p).map_err(|cause| FleetError::Tls(format!("cannot read {}: {cause}", p.display())))
        };
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&self.ca)?));
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        Ok(tls)
    }
}

/// The TLS options of `slaswitchd` and `slaswitch-master`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct EtcdTlsArgs {
    /// TLS to etcd: the CA certificate (PEM) that signed etcd's server certificate; the etcd
    /// URLs are then `https://`.
    #[arg(long, global = true, env = "SLASWITCH_ETCD_CA")]
    pub etcd_ca: Option<PathBuf>,
    /// This client's certificate (PEM), for an etcd that checks its clients.
    #[arg(long, global = true, env = "SLASWITCH_ETCD_CERT")]
    pub etcd_cert: Option<PathBuf>,
    /// This client's private key (PEM).
    #[arg(long, global = true, env = "SLASWITCH_ETCD_KEY")]
    pub etcd_key: Option<PathBuf>,
}

impl EtcdTlsArgs {
    /// The TLS settings, checked.
    pub fn tls(&self) -> Result<Option<EtcdTls>, FleetError> {
        EtcdTls::from_options(self.etcd_ca.clone(), self.etcd_cert.clone(), self.etcd_key.clone())
    }
}

/// Connects to the first of `endpoints` that answers (`https://` ones with `tls`).
pub async fn connect(endpoints: &[String], tls: Option<&EtcdTls>) -> Result<Client, FleetError> {
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
        // No more often than etcd's `--grpc-keepalive-min-time` (5 s): etcd closes a
        // connection that pings faster, with every stream on it.
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
    if let Some(t) = tls {
        opts = opts.with_tls(t.options()?);
    }
    Client::connect(endpoints, Some(opts))
        .await
        .map_err(|cause| FleetError::Connect { endpoints: endpoints.join(","), cause })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_takes_the_ca_alone_or_all_three_files() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(EtcdTls::from_options(None, None, None).unwrap(), None);
        assert!(EtcdTls::from_options(p("ca"), None, None).unwrap().unwrap().identity.is_none());
        assert!(EtcdTls::from_options(p("ca"), p("c"), p("k")).unwrap().unwrap().identity.is_some());
        let e = EtcdTls::from_options(p("ca"), p("c"), None).unwrap_err().to_string();
        assert!(e.contains("--etcd-cert and --etcd-key together"), "{e}");
        let e = EtcdTls::from_options(None, p("c"), p("k")).unwrap_err().to_string();
        assert!(e.contains("need --etcd-ca"), "{e}");
    }
}

/// etcd's default limit on the operations of one transaction (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// Keys read per request by [`get_prefix`]: a fleet's keys outgrow one gRPC message (4 MiB).
const PAGE_KEYS: i64 = 2000;

/// Every key under `prefix` and the revision they were read at, a page at a time, all pages
/// at that one revision. `serializable` reads what this member has applied without asking
/// the leader: enough before a watch from the returned revision, which brings every later
/// change.
pub async fn get_prefix(
    client: &mut Client,
    prefix: &str,
    serializable: bool,
) -> Result<(i64, Vec<KeyValue>), FleetError> {
    let end = prefix_end(prefix.as_bytes());
    let (mut from, mut revision, mut kvs) = (prefix.as_bytes().to_vec(), 0, Vec::new());
    loop {
        let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE_KEYS);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        if serializable {
            opts = opts.with_serializable();
        }
        let got = client.get(from.clone(), Some(opts)).await.map_err(e)?;
        if revision == 0 {
            revision = got.header().map_or(0, |h| h.revision());
        }
        let more = got.more();
        kvs.extend_from_slice(got.kvs());
        match (more, kvs.last()) {
            (true, Some(last)) => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok((revision, kvs)),
        }
    }
}

/// The first key after every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod prefix_tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_at_its_last_byte_plus_one() {
        assert_eq!(prefix_end(b"/s/hosts/"), b"/s/hosts0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0], "every key");
    }
}
