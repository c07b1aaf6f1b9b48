//! slaswitch-master: SoftBW's master (seed 003 Sec. 4) and the operator's verbs on the cluster.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use serde_json::json;
use slaswitch_cluster::admission::AdmissionSettings;
use slaswitch_cluster::etcd::{EtcdTls, EtcdTlsArgs};
use slaswitch_cluster::etcd_server::EtcdServer;
use slaswitch_cluster::keys::{Keys, DEFAULT_PREFIX};
use slaswitch_cluster::master::{Master, MasterSettings, StoreSpec};
use slaswitch_cluster::purchase::{unix_ns, Purchase};
use slaswitch_cluster::store::Store;
use slaswitch_cluster::{admin, bill, etcd, scale};
use slaswitch_config::bandwidth::parse_rate_bps;
use slaswitch_config::link_policy::{guarantee_text, parse_guarantee};
use slaswitch_qos::egress::softbw::Guarantee;
use slaswitch_qos::placement::Policy;
use slaswitch_qos::pricing::PriceParams;

#[derive(Parser, Debug)]
#[command(name = "slaswitch-master", version, about = "SoftBW's master: purchases over etcd, usage-based billing")]
struct Cli {
    /// etcd client URLs, comma-separated.
    #[arg(long, global = true, env = "SLASWITCH_ETCD", value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    etcd: Vec<String>,
    /// The cluster's key prefix in etcd.
    #[arg(long, global = true, default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    etcd_tls: EtcdTlsArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
struct StoreArgs {
    /// The SQLite billing store.
    #[arg(long, default_value = "/var/lib/slaswitch/billing.sqlite")]
    db: PathBuf,
    /// A PostgreSQL URL instead (postgresql://user@host/dbname).
    #[arg(long)]
    postgres: Option<String>,
}

impl StoreArgs {
    fn spec(&self) -> StoreSpec {
        match &self.postgres {
            Some(url) => StoreSpec::Postgres(url.clone()),
            None => StoreSpec::Sqlite(self.db.clone()),
        }
    }

    /// The store a reader opens: it must exist.
    fn open_existing(&self) -> anyhow::Result<Store> {
        match &self.postgres {
            Some(url) => Ok(Store::open_postgres(url)?),
            None => Ok(Store::open_sqlite_existing(&self.db)?),
        }
    }
}

#[derive(Args, Debug, Clone)]
struct PriceArgs {
    /// P0: the price of 1 Mbit/s for one second.
    #[arg(long, default_value_t = 1.0)]
    p0: f64,
    /// beta: the dynamic and fairness discount, (0, 1].
    #[arg(long, default_value_t = 0.8)]
    beta: f64,
    /// C in the price functions (e.g. 10G) for a host whose agent announces no uplink; a host
    /// with a paced uplink is priced by that link's rate.
    #[arg(long, default_value = "10G")]
    link_capacity: String,
}

impl PriceArgs {
    fn params(&self) -> anyhow::Result<PriceParams> {
        let p = PriceParams {
            p0_per_mbit: self.p0,
            beta: self.beta,
            link_capacity_bps: parse_rate_bps("link_capacity", &self.link_capacity)?,
        };
        p.validate()?;
        Ok(p)
    }
}

/// How the master admits and places purchases (seed 003 Sec. 4 with Sec. 2.2).
#[derive(Args, Debug, Clone)]
struct AdmissionArgs {
    /// `failure-model`: a host takes a guarantee while Eq. 2 with its VMs' measured mean
    /// rates keeps its failure probability at or under --target-failure; `guarantee`: while
    /// its guarantees add up to at most --max-overcommit times its uplink.
    #[arg(long, default_value = "failure-model")]
    placement: String,
    /// The largest failure probability a host may carry.
    #[arg(long, default_value_t = 0.05)]
    target_failure: f64,
    /// The largest committed ratio (guarantees over the uplink's rate) a host may carry.
    #[arg(long, default_value_t = 10.0)]
    max_overcommit: f64,
    /// The utilization assumed of a VM measured for fewer than --min-samples cycles.
    #[arg(long, default_value_t = 0.15)]
    prior_utilization: f64,
    /// Billed cycles after which a VM's measured mean rate replaces the prior.
    #[arg(long, default_value_t = 60)]
    min_samples: u64,
}

impl AdmissionArgs {
    fn settings(&self) -> anyhow::Result<AdmissionSettings> {
        let policy = match self.placement.as_str() {
            "failure-model" => {
                Policy::FailureModel { target_failure: self.target_failure, max_ratio: self.max_overcommit }
            }
            "guarantee" => Policy::Guarantee { max_ratio: self.max_overcommit },
            other => bail!("--placement {other}: give failure-model or guarantee"),
        };
        let s = AdmissionSettings { policy, prior_utilization: self.prior_utilization, min_samples: self.min_samples };
        s.validate().map_err(|why| anyhow::anyhow!("{why}"))?;
        Ok(s)
    }
}

/// The guarantee flags shared by `buy` and `set-guarantee`; exactly one.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
struct GuaranteeArgs {
    /// A strict rate (e.g. 300M).
    #[arg(long)]
    strict: Option<String>,
    /// A dynamic guarantee: SIZE,SECONDS (e.g. 500M,10).
    #[arg(long)]
    dynamic: Option<String>,
    /// Only a fair share.
    #[arg(long)]
    fairness: bool,
}

impl GuaranteeArgs {
    /// The guarantee asked for, parsed as the switch's `link_guarantee` option is.
    fn guarantee(&self) -> anyhow::Result<Guarantee> {
        let text = match (&self.strict, &self.dynamic) {
            (Some(r), _) => format!("strict:{r}"),
            (_, Some(d)) => format!("dynamic:{d}"),
            _ => "fairness".into(),
        };
        Ok(parse_guarantee(&text)?)
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the master: place purchases, bill every cycle, keep dynamic guarantees current.
    Serve {
        #[command(flatten)]
        master: MasterArgs,
    },
    /// Buy a guarantee for a VM.
    Buy {
        /// The VM (its switch port's name).
        vm: String,
        /// Who pays.
        #[arg(long)]
        tenant: String,
        /// The host it runs on (default: the one whose port announces it, when it does).
        #[arg(long)]
        host: Option<String>,
        #[command(flatten)]
        guarantee: GuaranteeArgs,
        /// Its cycle purchase and profile, key=value (bandwidth_bps, profile_packet_bytes,
        /// profile_flows, priority).
        #[arg(long = "cycles", value_name = "KEY=VALUE")]
        cycles: Vec<String>,
    },
    /// Change a VM's guarantee (and, with --cycles, its cycle purchase).
    SetGuarantee {
        vm: String,
        #[command(flatten)]
        guarantee: GuaranteeArgs,
        #[arg(long = "cycles", value_name = "KEY=VALUE")]
        cycles: Vec<String>,
    },
    /// End a VM's purchase.
    Release { vm: String },
    /// Purchase-to-enforcement latency: change a placed VM's guarantee ROUNDS times and time
    /// its switch's answers (it ends with the guarantee it had).
    Latency {
        vm: String,
        #[arg(long, default_value_t = 50)]
        rounds: usize,
    },
    /// The hosts: alive, their ports, what they enforce.
    Hosts,
    /// Every purchase: its host's answer, its latest rate and fulfillment.
    Vms {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// A tenant's bill.
    Bill {
        #[arg(long)]
        tenant: String,
        /// Start: Unix seconds, RFC 3339, or a duration ago (e.g. 10m).
        #[arg(long, default_value = "1h")]
        from: String,
        /// End: as --from; default now.
        #[arg(long)]
        to: Option<String>,
        /// Every record as CSV instead of the table.
        #[arg(long)]
        csv: bool,
        /// Also draw usage over time into this PNG.
        #[arg(long)]
        plot: Option<PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Scale experiment: many agents (counters in place of data planes) and a master, here.
    SimulateAgents(Box<SimulateArgs>),
}

/// `simulate-agents`' options.
#[derive(clap::Args, Debug)]
struct SimulateArgs {
    #[arg(long, default_value_t = 2000)]
    agents: usize,
    #[arg(long, default_value_t = 4)]
    vms_per_agent: usize,
    /// Seconds measured once every agent is up.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// Purchases per second while it runs.
    #[arg(long, default_value_t = 5.0)]
    buys_per_sec: f64,
    /// Start a private etcd (on loopback, removed after) instead of using --etcd.
    #[arg(long)]
    private_etcd: bool,
    /// A master already serves --etcd and --prefix in its own process (`serve`): start none
    /// here.
    #[arg(long, conflicts_with = "private_etcd")]
    external_master: bool,
    /// How often each agent polls its switch between etcd events, ms (slaswitchd's agent:
    /// 50). The simulated agents share this host's cores, so they poll less by default.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    agent_poll_ms: u64,
    /// Cycles whose reports each agent writes in one transaction (slaswitchd's agent: 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=3600))]
    report_every: u64,
    /// Each agent's lease, seconds (slaswitchd's agent: 5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(i64).range(2..=300))]
    lease_ttl: i64,
    /// Agents sharing one etcd connection, each with its own lease and watch (1: a
    /// connection each, as hosts have).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    agents_per_connection: u64,
    /// Agents started per second.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=100_000))]
    agents_per_sec: u64,
    #[command(flatten)]
    master: MasterArgs,
}

/// How a master runs: its store, its prices, its admission.
#[derive(clap::Args, Debug)]
struct MasterArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    prices: PriceArgs,
    #[command(flatten)]
    admission: AdmissionArgs,
}

impl MasterArgs {
    /// The master's settings on etcd `endpoints` under `prefix`.
    fn settings(&self, endpoints: Vec<String>, tls: Option<EtcdTls>, prefix: String) -> anyhow::Result<MasterSettings> {
        Ok(MasterSettings {
            endpoints,
            tls,
            prefix,
            prices: self.prices.params()?,
            store: self.store.spec(),
            admission: self.admission.settings()?,
        })
    }
}

/// `--cycles` words as options.
fn key_values(words: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    slaswitch_config::cli::key_values(words).context("--cycles")
}

/// A time: Unix seconds, RFC 3339, or a duration before now; Unix milliseconds.
fn time_ms(s: &str) -> anyhow::Result<u64> {
    let now = unix_ns() / 1_000_000;
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(secs * 1000);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64));
    }
    humantime::parse_duration(s)
        .map(|d| now.saturating_sub(d.as_millis() as u64))
        .map_err(|_| anyhow::anyhow!("'{s}': Unix seconds, an RFC 3339 time, or a duration ago such as 10m"))
}

fn print(json_out: bool, value: serde_json::Value, text: String) {
    if json_out {
        println!("{}", serde_json::to_string_pretty(&value).expect("JSON"));
    } else {
        print!("{text}");
    }
}

fn main() {
    let cli: Cli = slaswitch_config::cli::parse_args(None);
    // Thousands of simulated agents would each log their connection.
    let level = match cli.command {
        Command::SimulateAgents(_) => tracing::Level::WARN,
        _ => tracing::Level::INFO,
    };
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_target(false).with_max_level(level).init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    if let Err(e) = rt.block_on(run(cli)) {
        eprintln!("slaswitch-master: {e:#}");
        std::process::exit(1);
    }
}

/// Serves until SIGINT or SIGTERM, then lets the master finish its cycle.
async fn serve(master: Master) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    tracing::info!("master serving");
    let r = master.serve(stop).await;
    watcher.abort();
    Ok(r?)
}

fn hosts_table(hosts: &[admin::HostView]) -> String {
    let mut text = format!(
        "{:<16} {:<6} {:>9} {:>6} {:>11} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9}\n",
        "host",
        "alive",
        "uplink",
        "ports",
        "guarantees",
        "applied",
        "refused",
        "committed",
        "failure",
        "expected",
        "measured"
    );
    for h in hosts {
        let uplink = h.uplink_bps.map_or("-".to_string(), |b| format!("{:.1}G", b as f64 / 1e9));
        let f = h.load.as_ref().map(|l| l.figures);
        let cell = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        text += &format!(
            "{:<16} {:<6} {:>9} {:>6} {:>11} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9}\n",
            h.host,
            if h.alive { "yes" } else { "NO" },
            uplink,
            h.ports.len(),
            h.guarantees,
            h.applied,
            h.refused,
            cell(f.map(|f| f.committed_ratio), 2),
            cell(f.map(|f| f.failure_probability), 4),
            cell(f.map(|f| f.expected_utilization), 3),
            cell(h.load.as_ref().and_then(|l| l.measured_utilization), 3),
        );
    }
    text
}

fn vms_table(views: &[admin::VmView]) -> String {
    let mut text = format!(
        "{:<16} {:<12} {:<12} {:<24} {:<9} {:>10} {:>8}  {}\n",
        "vm", "tenant", "host", "guarantee", "state", "Mbit/s", "F", "reason"
    );
    for v in views {
        let st = v.status.as_ref();
        text += &format!(
            "{:<16} {:<12} {:<12} {:<24} {:<9} {:>10} {:>8}  {}\n",
            v.purchase.vm,
            v.purchase.tenant,
            v.purchase.host.as_deref().unwrap_or("-"),
            guarantee_text(&v.purchase.guarantee),
            st.map_or(if v.purchase.host.is_some() { "sent".into() } else { "unplaced".into() }, |s| s
                .state
                .to_string()),
            v.latest.as_ref().map_or("-".into(), |r| format!("{:.3}", r.rate_bps / 1e6)),
            v.latest.as_ref().and_then(|r| r.fulfillment).map_or("-".into(), |f| format!("{f:.3}")),
            st.and_then(|s| s.reason.clone()).unwrap_or_default()
        );
    }
    text
}

/// `buy`: checked here first, so a bad purchase is refused before etcd is even asked.
async fn buy(etcd: Etcd<'_>, keys: &Keys, p: Purchase, as_json: bool) -> anyhow::Result<()> {
    p.validate()?;
    let mut client = etcd::connect(etcd.0, etcd.1).await?;
    let p = admin::buy(&mut client, keys, p).await?;
    let figures = p.admission.as_ref().and_then(|a| a.figures).map_or(String::new(), |f| {
        format!(
            ": committed ratio {:.2}, failure probability {:.4}, expected utilization {:.3}",
            f.committed_ratio, f.failure_probability, f.expected_utilization
        )
    });
    let where_ = format!("placed on {}{figures}", p.host.as_deref().unwrap_or("-"));
    let text = format!("{}: bought {} for tenant {} ({where_})\n", p.vm, guarantee_text(&p.guarantee), p.tenant);
    print(as_json, json!(p), text);
    Ok(())
}

/// `latency`: changes a VM's guarantee `rounds` times and times each until its switch answers.
async fn latency(etcd: Etcd<'_>, keys: &Keys, vm: &str, rounds: usize, as_json: bool) -> anyhow::Result<()> {
    let mut client = etcd::connect(etcd.0, etcd.1).await?;
    let samples = admin::measure_enforcement(&mut client, keys, vm, rounds).await?;
    let applied = scale::percentiles(samples.iter().map(|s| s.0).collect());
    let seen = scale::percentiles(samples.iter().map(|s| s.1).collect());
    let text = format!(
        "{vm}, {rounds} changes: applied by its switch p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; \
         answer seen here p50 {:.2} ms, p99 {:.2} ms\n",
        applied.p50_ms, applied.p99_ms, applied.max_ms, seen.p50_ms, seen.p99_ms
    );
    print(as_json, json!({"vm": vm, "applied": applied, "answer_seen": seen}), text);
    Ok(())
}

/// etcd's URLs and TLS.
type Etcd<'a> = (&'a [String], Option<&'a EtcdTls>);

async fn run(cli: Cli) -> anyhow::Result<()> {
    let keys = Keys::new(&cli.prefix);
    let tls = cli.etcd_tls.tls()?;
    match cli.command {
        Command::Serve { master } => serve(Master::new(master.settings(cli.etcd, tls, cli.prefix)?)?).await,
        Command::Buy { vm, tenant, host, guarantee, cycles } => {
            let p = Purchase {
                vm,
                tenant,
                host,
                guarantee: guarantee.guarantee()?,
                cycles: key_values(&cycles)?,
                bought_unix_ms: unix_ns() / 1_000_000,
                admission: None,
            };
            buy((&cli.etcd, tls.as_ref()), &keys, p, cli.json).await
        }
        Command::SetGuarantee { vm, guarantee, cycles } => {
            let cycles = (!cycles.is_empty()).then(|| key_values(&cycles)).transpose()?;
            let mut client = etcd::connect(&cli.etcd, tls.as_ref()).await?;
            let (p, _) = admin::set_guarantee(&mut client, &keys, &vm, guarantee.guarantee()?, cycles).await?;
            print(cli.json, json!(p), format!("{}: now {}\n", p.vm, guarantee_text(&p.guarantee)));
            Ok(())
        }
        Command::Release { vm } => {
            let mut client = etcd::connect(&cli.etcd, tls.as_ref()).await?;
            let p = admin::release(&mut client, &keys, &vm).await?;
            print(cli.json, json!(p), format!("{}: released\n", p.vm));
            Ok(())
        }
        Command::Latency { vm, rounds } => latency((&cli.etcd, tls.as_ref()), &keys, &vm, rounds, cli.json).await,
        Command::Hosts => {
            let mut client = etcd::connect(&cli.etcd, tls.as_ref()).await?;
            let hosts = admin::hosts(&mut client, &keys).await?;
            let text = hosts_table(&hosts);
            print(cli.json, json!(hosts), text);
            Ok(())
        }
        Command::Vms { store } => {
            let mut client = etcd::connect(&cli.etcd, tls.as_ref()).await?;
            let mut s = store.open_existing().ok();
            let views = admin::vms(&mut client, &keys, s.as_mut()).await?;
            let text = vms_table(&views);
            print(cli.json, json!(views), text);
            Ok(())
        }
        Command::Bill { tenant, from, to, csv, plot, store } => {
            let (from_ms, to_ms) =
                (time_ms(&from)?, to.as_deref().map(time_ms).transpose()?.unwrap_or(unix_ns() / 1_000_000 + 1));
            if from_ms >= to_ms {
                bail!("--from {from} is not before --to");
            }
            let mut s = store.open_existing()?;
            let records = s.records(Some(&tenant), from_ms, to_ms)?;
            let b = bill::bill(&tenant, from_ms, to_ms, &records);
            if let Some(path) = plot {
                bill::plot(&path, &b, &records)?;
            }
            match csv {
                true => print!("{}", bill::csv(&records)),
                false => print(cli.json, json!(b), bill::table(&b)),
            }
            Ok(())
        }
        Command::SimulateAgents(args) => simulate(cli.etcd, tls, cli.prefix, cli.json, *args).await,
    }
}

/// The scale experiment (`simulate-agents`).
async fn simulate(
    etcd: Vec<String>,
    tls: Option<EtcdTls>,
    prefix: String,
    as_json: bool,
    a: SimulateArgs,
) -> anyhow::Result<()> {
    let SimulateArgs {
        agents,
        vms_per_agent,
        secs,
        buys_per_sec,
        private_etcd,
        external_master,
        agent_poll_ms,
        report_every,
        lease_ttl,
        agents_per_connection,
        agents_per_sec,
        master,
    } = a;
    let dir = std::env::temp_dir().join(format!("slaswitch-scale-etcd-{}", std::process::id()));
    let server = private_etcd.then(|| EtcdServer::start(&dir)).transpose()?;
    let endpoints = server.as_ref().map_or(etcd, |s| vec![s.url()]);
    let tls = if server.is_some() { None } else { tls };
    let master = master.settings(endpoints.clone(), tls.clone(), prefix.clone())?;
    let settings = scale::ScaleSettings {
        endpoints,
        tls,
        prefix,
        agents,
        vms_per_agent,
        secs,
        buys_per_sec,
        agent_poll_ms,
        report_every_cycles: report_every as usize,
        lease_ttl_secs: lease_ttl,
        agents_per_connection: agents_per_connection as usize,
        agents_started_per_sec: agents_per_sec as usize,
        master: (!external_master).then_some(master),
    };
    let r = scale::run(settings, |m| eprintln!("{m}")).await?;
    let text = format!("{}\n", serde_json::to_string_pretty(&r).expect("JSON"));
    print(as_json, json!(r), text);
    Ok(())
}
