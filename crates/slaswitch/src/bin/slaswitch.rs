//! slaswitch: the command line for slaswitchd, with verbs in the style of ovs-vsctl/ovs-appctl.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser, Subcommand};
use slaswitch::control::{request, DEFAULT_MODEL_PATH, DEFAULT_RUN_DIR, SOCKET_NAME};
use slaswitch::protocol::{PortChange, Request};
use slaswitch_config::cli::key_values;

/// The command line for slaswitchd. `set-port` commands joined with `--` change their ports as
/// one step: admission judges the final state (live options only).
#[derive(Parser, Debug)]
#[command(name = "slaswitch", version)]
struct Cli {
    /// The daemon's control socket.
    #[arg(long, global = true, env = "SLASWITCH_SOCKET", default_value_t = default_socket())]
    socket: String,
    /// Print the daemon's reply as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Verb,
}

fn default_socket() -> String {
    format!("{DEFAULT_RUN_DIR}/{SOCKET_NAME}")
}

#[derive(Subcommand, Debug)]
enum Verb {
    /// Add a port: TYPE is vhost-user, vhost-user-client, tap, af-packet, null or dpdk.
    AddPort {
        name: String,
        port_type: String,
        options: Vec<String>,
    },
    DelPort {
        name: String,
    },
    /// Set a port's options (KEY=VALUE...).
    SetPort {
        name: String,
        options: Vec<String>,
    },
    ListPorts,
    /// Add a flow, e.g. "priority=10,in_port=vm1,actions=output:uplink".
    AddFlow {
        flow: String,
    },
    /// Add the flows of a file, one per line (# comments), all or none.
    AddFlows {
        file: PathBuf,
    },
    DelFlows {
        matcher: Option<String>,
        #[arg(long)]
        strict: bool,
    },
    DumpFlows,
    PortStats {
        name: Option<String>,
    },
    /// Per port: Kpps, Mbps, cycles/packet by stage, PMD share, EMC hits.
    PmdStats,
    /// C2QoS per port: purchase, model entry and coefficients, cycles, mode, class, tokens, use.
    QosShow {
        name: Option<String>,
    },
    /// Use a bandwidth-CPU model (default: the daemon's own file).
    LoadModel {
        file: Option<PathBuf>,
    },
    /// The bandwidth-CPU model in use.
    ModelShow,
    /// A paced port's link scheduler, per VM: queue, settings, rate, share, fulfillment, drops.
    LinkShow {
        name: Option<String>,
    },
    /// Add a tenant (PIE-VDE's first level) or change its weight: weight=W.
    SetTenant {
        name: String,
        options: Vec<String>,
    },
    /// Remove a tenant no port names.
    DelTenant {
        name: String,
    },
    /// The persisted configuration.
    Show,
    /// Measure this host's bandwidth-CPU model (slaswitchd stopped).
    Calibrate(CalibrateArgs),
    /// Run a test-bed scenario on each switch (`experiment run SCENARIO [--switch S] [--rounds
    /// N] [--out DIR]`), rebuild a run's report (`experiment report DIR`), measure what the
    /// host takes from a core (`experiment host-noise --core N`) or how far apart it placed two
    /// (`experiment core-latency --cores A,B`): the test bed's `slaswitch-experiment`, built
    /// beside this program.
    #[command(disable_help_flag = true)]
    Experiment {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Args, Debug)]
struct CalibrateArgs {
    #[arg(long, default_value = DEFAULT_MODEL_PATH)]
    out: PathBuf,
    #[arg(long, default_value_t = 3.0, value_parser = in_range(0.5, 60.0))]
    seconds: f64,
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// VM counts to measure the coefficients at, each 1 to 64.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    vm_counts: Vec<u32>,
    #[arg(long, default_value_t = 99)]
    security_group_masks: usize,
    #[arg(long, default_value_t = 20000)]
    many_flows: u32,
    /// Paces of the light VM the batch term is measured at, kpps, each 1 to 5000.
    #[arg(long, value_delimiter = ',', default_value = "10,60,200,500", value_parser = in_range(1.0, 5000.0))]
    batch_rates: Vec<f64>,
    /// Backlogged VMs beside the light one while the batch term is measured, 1 to 15.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=15))]
    batch_neighbours: u32,
    #[arg(long, default_value_t = 0)]
    pmd_core: usize,
    #[arg(long, default_value_t = 1)]
    vm_core: usize,
    /// The remote-NUMA factor, 1 to 10.
    #[arg(long, default_value_t = 1.4, value_parser = in_range(1.0, 10.0))]
    numa_remote: f64,
    /// CORES=FACTOR: the PMD-count coefficient for that many PMD cores (e.g. 2=1.47), given
    /// instead of measured.
    #[arg(long, value_parser = pmd_factor)]
    pmd_factor: Vec<(u32, f64)>,
    /// PMD counts to measure the PMD-count coefficient at (one backlogged VM per PMD), each 1
    /// to 64; beyond the free cores the extra PMDs share the VMs' core.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::value_parser!(u32).range(1..=64))]
    pmd_counts: Vec<u32>,
    #[arg(long)]
    quiet: bool,
}

fn in_range(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |s| match s.parse::<f64>() {
        Ok(x) if (lo..=hi).contains(&x) => Ok(x),
        _ => Err(format!("'{s}' is not a number from {lo} to {hi}")),
    }
}

fn pmd_factor(kv: &str) -> Result<(u32, f64), String> {
    let (n, r) = kv.split_once('=').ok_or_else(|| format!("'{kv}': use CORES=FACTOR, e.g. 2=1.47"))?;
    let n: u32 = n.parse().map_err(|_| format!("'{n}' is not a core count"))?;
    let r = r.parse::<f64>().ok().filter(|r| *r >= 1.0 && r.is_finite());
    Ok((n, r.ok_or_else(|| format!("'{kv}': the factor must be a number >= 1"))?))
}

/// Where the verb is: the first word after the program's name that is not a global option
/// (`--socket S`, `--socket=S`, `--json`).
fn verb_at(words: &[String]) -> Option<usize> {
    let mut i = 1;
    while let Some(w) = words.get(i) {
        match w.as_str() {
            "--socket" => i += 2,
            "--json" => i += 1,
            w if w.starts_with("--socket=") => i += 1,
            _ => return Some(i),
        }
    }
    None
}

fn main() {
    if let Err(e) = run() {
        eprintln!("slaswitch: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let mut words: Vec<String> = std::env::args().collect();
    // `-- set-port ...` joins commands, as in ovs-vsctl: split them off before parsing the first.
    // Not for `experiment`, whose words are all the test bed's (`experiment shield ... -- CMD`).
    let passes_through = verb_at(&words).is_some_and(|v| words[v] == "experiment");
    let mut joined = match words.iter().position(|w| w == "--") {
        Some(i) if !passes_through => words.split_off(i),
        _ => Vec::new(),
    };
    // A trailing --json belongs to the whole command.
    if joined.last().is_some_and(|w| w == "--json") {
        words.push(joined.pop().expect("checked"));
    }
    let cli: Cli = slaswitch_config::cli::parse_args(Some(&words));
    let req = match cli.command {
        Verb::Calibrate(args) => return calibrate(args),
        Verb::Experiment { args } => return experiment(&args),
        other => to_request(other, &joined)?,
    };
    let reply = request(std::path::Path::new(&cli.socket), &req).map_err(anyhow::Error::msg)?;
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&reply).context("cannot print the reply")?);
    } else {
        print!("{reply}");
    }
    Ok(())
}

/// The request a verb makes.
fn to_request(verb: Verb, joined: &[String]) -> anyhow::Result<Request> {
    if !joined.is_empty() && !matches!(verb, Verb::SetPort { .. }) {
        bail!("only set-port commands can be joined with --");
    }
    Ok(match verb {
        Verb::AddPort { name, port_type, options } => {
            Request::AddPort { name, port_type, options: key_values(&options)? }
        }
        Verb::DelPort { name } => Request::DelPort { name },
        Verb::SetPort { name, options } => set_port(name, &options, joined)?,
        Verb::ListPorts => Request::ListPorts,
        Verb::AddFlow { flow } => Request::AddFlow { flows: vec![flow] },
        Verb::AddFlows { file } => {
            let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
            let flows = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
            Request::AddFlow { flows: flows.map(str::to_string).collect() }
        }
        Verb::DelFlows { matcher, strict } => Request::DelFlows { matcher, strict },
        Verb::DumpFlows => Request::DumpFlows,
        Verb::PortStats { name } => Request::PortStats { name },
        Verb::PmdStats => Request::PmdStats,
        Verb::QosShow { name } => Request::QosShow { name },
        Verb::LoadModel { file } => {
            // The daemon reads the file itself; a relative path means the caller's folder.
            let path = file.map(|p| std::fs::canonicalize(&p).with_context(|| p.display().to_string())).transpose()?;
            Request::LoadModel { path }
        }
        Verb::ModelShow => Request::ModelShow,
        Verb::LinkShow { name } => Request::LinkShow { name },
        Verb::SetTenant { name, options } => set_tenant(name, &options)?,
        Verb::DelTenant { name } => Request::DelTenant { name },
        Verb::Show => Request::Show,
        Verb::Calibrate(_) | Verb::Experiment { .. } => unreachable!("handled by run"),
    })
}

/// `set-port NAME K=V... [-- set-port NAME K=V...]`: one port, or several changed as one step.
fn set_port(name: String, options: &[String], joined: &[String]) -> anyhow::Result<Request> {
    let mut ports = vec![PortChange { name, options: key_values(options)? }];
    for command in joined.split(|w| w == "--").skip(1) {
        match command {
            [verb, name, options @ ..] if verb == "set-port" => {
                ports.push(PortChange { name: name.clone(), options: key_values(options)? })
            }
            [verb] if verb == "set-port" => bail!("set-port needs a port name"),
            [other, ..] => bail!("only set-port commands can be joined with -- (found '{other}')"),
            [] => bail!("an empty command between --"),
        }
    }
    Ok(Request::SetPort { ports })
}

/// `set-tenant NAME weight=W`.
fn set_tenant(name: String, options: &[String]) -> anyhow::Result<Request> {
    let mut kv = key_values(options)?;
    let w = kv.remove("weight").context("set-tenant NAME weight=W: the weight is missing")?;
    if let Some(k) = kv.keys().next() {
        bail!("set-tenant: unknown option '{k}' (known: weight)");
    }
    let weight = w.parse::<u32>().map_err(|_| anyhow!("weight={w}: a whole number from 1 to 10000"))?;
    Ok(Request::SetTenant { name, weight })
}

/// `experiment ...`: the test bed's runner takes this process's place with the same words, so
/// it gets the terminal's signals (its Ctrl-C cleans up) and its exit status is ours.
fn experiment(args: &[String]) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let runner = tools_dir()?.join("slaswitch-experiment");
    if !runner.exists() {
        bail!("{} is not built (cargo build --release -p slaswitch-testbed, or the whole workspace)", runner.display());
    }
    let e = std::process::Command::new(&runner).args(args).exec();
    Err(anyhow::Error::new(e).context(runner.display().to_string()))
}

/// The folder of this program, where its sibling programs are.
fn tools_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find this program")?;
    exe.parent().map(PathBuf::from).with_context(|| format!("{} has no folder", exe.display()))
}

fn calibrate(a: CalibrateArgs) -> anyhow::Result<()> {
    let opts = slaswitch::calibrate::CalibrateOptions {
        out: a.out,
        tools: tools_dir()?,
        pmd_core: a.pmd_core,
        vm_core: a.vm_core,
        seconds: a.seconds,
        repeats: a.repeats,
        vm_counts: a.vm_counts,
        security_group_masks: a.security_group_masks,
        many_flows: a.many_flows,
        batch_rates_kpps: a.batch_rates,
        batch_neighbours: a.batch_neighbours as usize,
        pmd_factors: a.pmd_factor,
        pmd_counts: a.pmd_counts,
        numa_remote: a.numa_remote,
        quiet: a.quiet,
    };
    let model = slaswitch::calibrate::calibrate(&opts).map_err(anyhow::Error::msg)?;
    print!("{}", slaswitch::calibrate::render(&model));
    println!("written to {}", opts.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::verb_at;

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(String::from).collect()
    }

    #[test]
    fn the_verb_is_the_first_word_past_the_global_options() {
        assert_eq!(verb_at(&words("slaswitch experiment shield -- sh")), Some(1));
        assert_eq!(verb_at(&words("slaswitch --socket /s --json experiment run x")), Some(4));
        assert_eq!(verb_at(&words("slaswitch --socket=/s add-port experiment vhost-user -- set-port a")), Some(2));
        assert_eq!(verb_at(&words("slaswitch --json")), None);
    }
}
