//! slaswitchd's control plane on one tokio runtime: the control socket (a task per connection;
//! the daemon's lock is taken only to handle a request already read), the sampler, the metrics
//! endpoint and the cluster agent, all stopped by SIGINT or SIGTERM.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::runtime::Runtime;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{watch, Semaphore};

use super::{access, cluster_agent, metrics, Daemon};
use crate::error::DaemonError;
use crate::protocol::{parse_request, Reply};

/// The longest request line the control socket reads, bytes: room for a flow table of a few
/// hundred thousand rules in one `add-flows`, which applies whole or not at all.
pub const MAX_REQUEST_BYTES: u64 = 32 << 20;
/// Control connections served at once; more are answered "busy" at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request, or to take its reply.
const CLIENT_DEADLINE: Duration = Duration::from_secs(10);
/// How often the sampler takes the rates' (and the metrics') snapshot.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The control plane's runtime: two threads, both on the control core (`main_core`), never on a
/// PMD's.
pub fn runtime(main_core: usize) -> std::io::Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("slaswitchd-control")
        .on_thread_start(move || {
            if let Err(e) = slaswitch_datapath::pmd::pin_to_core(main_core) {
                tracing::warn!("control thread not pinned to core {main_core}: {e}");
            }
        })
        .enable_all()
        .build()
}

/// SIGINT and SIGTERM, registered before the data plane starts so that one arriving meanwhile
/// stops the daemon once it is up instead of killing it half-started. (Rust's runtime already
/// ignores SIGPIPE: a client that hangs up gives a write error, not the end of the daemon.)
pub struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
}

impl StopSignals {
    /// Registers both on `rt`.
    pub fn register(rt: &Runtime) -> std::io::Result<StopSignals> {
        let _entered = rt.enter();
        Ok(StopSignals { interrupt: signal(SignalKind::interrupt())?, terminate: signal(SignalKind::terminate())? })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// What the control plane serves.
pub struct ControlPlane {
    /// The control socket's path.
    pub socket: PathBuf,
    /// Its group (0: root only).
    pub socket_gid: u32,
    /// Where to serve `GET /metrics`, if anywhere.
    pub metrics_addr: Option<String>,
    /// The cluster agent's settings, when the switch is part of a fleet.
    pub agent: Option<slaswitch_agent::agent::AgentSettings>,
}

/// Serves until a stop signal; then the agent reports its last cycle, open connections end
/// within their deadline, and the data plane shuts down.
pub fn serve(rt: Runtime, mut signals: StopSignals, daemon: Daemon, plane: ControlPlane) -> Result<(), DaemonError> {
    let daemon = Arc::new(Mutex::new(daemon));
    let result = rt.block_on(async {
        let listener = access::bind_control_socket(&plane.socket, plane.socket_gid)?;
        listener.set_nonblocking(true).map_err(DaemonError::ControlPlane)?;
        let listener = UnixListener::from_std(listener).map_err(DaemonError::ControlPlane)?;
        let (stop_tx, stop) = watch::channel(false);
        let published = sampler(&daemon, plane.metrics_addr.is_some(), stop.clone());
        let metrics = match (&plane.metrics_addr, published) {
            (Some(addr), Some(published)) => Some(metrics::serve(addr, published, stop.clone()).await?),
            _ => None,
        };
        // The agent stops on its own flag, after the accept loop, while the data plane still
        // counts: it reports the last partial cycle and gives its lease back.
        let agent_stop = Arc::new(AtomicBool::new(false));
        let agent = plane.agent.map(|s| cluster_agent::spawn(daemon.clone(), s, agent_stop.clone()));
        let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        accept_until_stopped(&listener, &daemon, &open, &mut signals).await;
        let _ = stop_tx.send(true);
        agent_stop.store(true, Ordering::SeqCst);
        if let Some(a) = agent {
            let _ = a.await;
        }
        // Connections still open end within their deadline; the data plane shuts down after them.
        let all = u32::try_from(MAX_CONNECTIONS).expect("a small number");
        let _ = tokio::time::timeout(CLIENT_DEADLINE + Duration::from_secs(1), open.acquire_many(all)).await;
        if let Some(m) = metrics {
            let _ = m.await;
        }
        Ok(())
    });
    let _ = std::fs::remove_file(&plane.socket);
    rt.shutdown_timeout(Duration::from_secs(1));
    match Arc::try_unwrap(daemon) {
        Ok(m) => m.into_inner().expect("daemon lock").shutdown(),
        Err(_) => tracing::warn!("control state still in use at exit"),
    }
    result
}

/// Accepts connections, each served on its own task, until a stop signal: a slow or silent
/// client delays nobody. Past `MAX_CONNECTIONS` a client is told at once that the daemon is busy.
async fn accept_until_stopped(
    listener: &UnixListener,
    daemon: &Arc<Mutex<Daemon>>,
    open: &Arc<Semaphore>,
    signals: &mut StopSignals,
) {
    loop {
        let stream = tokio::select! {
            _ = signals.recv() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("control socket: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        match open.clone().try_acquire_owned() {
            Ok(permit) => {
                let daemon = daemon.clone();
                tokio::spawn(async move {
                    serve_connection(&daemon, stream).await;
                    drop(permit);
                });
            }
            Err(_) => {
                let busy = Reply::Err(format!("slaswitchd is serving {MAX_CONNECTIONS} connections; try again"));
                tokio::spawn(write_reply(stream, busy));
            }
        }
    }
}

/// Reads one request (at most `MAX_REQUEST_BYTES`, within `CLIENT_DEADLINE`), handles it on a
/// blocking thread (a change may wait for the PMDs) and always replies.
async fn serve_connection(daemon: &Arc<Mutex<Daemon>>, stream: UnixStream) {
    let mut line = String::new();
    let mut reader = BufReader::new(stream).take(MAX_REQUEST_BYTES + 1);
    let read = tokio::time::timeout(CLIENT_DEADLINE, reader.read_line(&mut line)).await;
    let reply = match read {
        Ok(Ok(n)) if n as u64 > MAX_REQUEST_BYTES => {
            Reply::Err(format!("the request is longer than {MAX_REQUEST_BYTES} bytes"))
        }
        Ok(Ok(_)) => match parse_request(&line) {
            Ok(req) => {
                let daemon = daemon.clone();
                tokio::task::spawn_blocking(move || daemon.lock().expect("daemon lock").handle(req))
                    .await
                    .unwrap_or_else(|e| Reply::Err(format!("the request failed: {e}")))
            }
            Err(e) => Reply::Err(e.to_string()),
        },
        Ok(Err(e)) => Reply::Err(format!("cannot read the request: {e}")),
        Err(_) => Reply::Err(format!("no request within {} s", CLIENT_DEADLINE.as_secs())),
    };
    write_reply(reader.into_inner().into_inner(), reply).await;
}

async fn write_reply(mut stream: UnixStream, reply: Reply) {
    let mut line = serde_json::to_string(&reply).expect("replies serialise");
    line.push('\n');
    let _ = tokio::time::timeout(CLIENT_DEADLINE, stream.write_all(line.as_bytes())).await;
}

/// Takes the rates' snapshot every second and, when metrics are served, the metrics' snapshot
/// with it: a scrape encodes the latest one and never takes the daemon's lock, so no scrape
/// delays a control request. Returns where the metrics' snapshot is published.
fn sampler(
    daemon: &Arc<Mutex<Daemon>>,
    with_metrics: bool,
    mut stop: watch::Receiver<bool>,
) -> Option<Arc<Mutex<Arc<metrics::MetricsSnapshot>>>> {
    let published =
        with_metrics.then(|| Arc::new(Mutex::new(Arc::new(daemon.lock().expect("daemon lock").metrics_snapshot()))));
    let (daemon, out) = (daemon.clone(), published.clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(SAMPLE_EVERY);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = every.tick() => {}
            }
            let (daemon, out) = (daemon.clone(), out.clone());
            let _ = tokio::task::spawn_blocking(move || {
                let snapshot = {
                    let mut d = daemon.lock().expect("daemon lock");
                    d.sample();
                    out.as_ref().map(|_| d.metrics_snapshot())
                };
                if let (Some(p), Some(s)) = (&out, snapshot) {
                    *p.lock().expect("metrics snapshot") = Arc::new(s);
                }
            })
            .await;
        }
    });
    published
}
