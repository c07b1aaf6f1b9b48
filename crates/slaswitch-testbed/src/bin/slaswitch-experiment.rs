//! slaswitch-experiment: the test bed's runner. `slaswitch experiment ...` runs it; it stands
//! each switch up with the same VMs for every step of a scenario, and writes the run's samples,
//! plots and report.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use slaswitch_testbed::scenario::SwitchKind;

/// Most rounds `run --rounds` accepts (each round runs every configuration again).
const MAX_ROUNDS: u64 = 20;

/// Run a test-bed scenario on each switch, or rebuild a run's report.
#[derive(Parser, Debug)]
#[command(name = "slaswitch experiment", bin_name = "slaswitch experiment", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run SCENARIO (experiments/*.toml) on each switch.
    Run {
        scenario: PathBuf,
        /// slaswitch, ovs-dpdk, linux-tc or vde2 (repeat or separate with commas).
        #[arg(long, value_delimiter = ',')]
        switch: Vec<String>,
        /// Run every configuration this many times, interleaved; the report adds the medians.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_ROUNDS))]
        rounds: u64,
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        quiet: bool,
    },
    /// Rebuild a run's report.md and plots from its samples.
    Report { dir: PathBuf },
    /// Measure what the host takes from CORE in gaps the guest kernel does not count (a thread
    /// spinning on the TSC there): how quiet a PMD core is, and the floor under a residence p99.
    HostNoise {
        /// The core to measure (0 up to the machine's last).
        #[arg(long)]
        core: usize,
        /// How long to spin, 0.1 to 600.
        #[arg(long, default_value_t = 5.0)]
        secs: f64,
        /// The figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure how far apart the host placed two cores: the round trip of a cache line between
    /// threads pinned to them (tens of ns within a shared cache, hundreds across). Every cost
    /// that crosses the two, a VM's frames reaching the PMD among them, moves with it.
    CoreLatency {
        /// The two cores (comma-separated): the writing thread's, then the echoing thread's.
        #[arg(long, value_delimiter = ',', num_args = 1, default_value = "0,1")]
        cores: Vec<usize>,
        /// How long to measure, in ms: 1 to 60000.
        #[arg(long, default_value_t = 100)]
        ms: u64,
        /// The figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run COMMAND with the PMD cores shielded, as a run of the test bed is: every other
    /// thread of the machine that may move (COMMAND too, and what it starts) is kept off them
    /// until COMMAND ends, then each gets its own cores back. COMMAND finds the number of
    /// threads moved in SLASWITCH_SHIELDED_THREADS; the programs it starts pin their PMDs.
    Shield {
        /// The cores kept for PMDs (comma-separated); at least one other core must stay.
        #[arg(long, value_delimiter = ',', num_args = 1, required = true)]
        pmd_cores: Vec<usize>,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
}

fn main() {
    let cli: Cli = slaswitch_config::cli::parse_args(None);
    if let Err(e) = run(cli) {
        eprintln!("slaswitch experiment: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let dir = match cli.command {
        Command::Run { scenario, switch, rounds, out, quiet } => {
            let switches =
                switch.iter().filter(|s| !s.is_empty()).map(|s| SwitchKind::parse(s)).collect::<Result<_, _>>()?;
            let opts = slaswitch_testbed::runner::RunOptions {
                scenario_path: scenario,
                switches,
                out_dir: out,
                tools: tools_dir()?,
                quiet,
                rounds: rounds as usize,
            };
            slaswitch_testbed::runner::run(&opts).map_err(anyhow::Error::msg)?
        }
        Command::Report { dir } => {
            slaswitch_testbed::report::generate(&dir).map_err(anyhow::Error::msg)?;
            dir
        }
        Command::HostNoise { core, secs, json } => return host_noise(core, secs, json),
        Command::CoreLatency { cores, ms, json } => return core_latency(&cores, ms, json),
        Command::Shield { pmd_cores, command } => std::process::exit(shield(&pmd_cores, &command)?),
    };
    println!("{}", dir.join("report.md").display());
    Ok(())
}

fn host_noise(core: usize, secs: f64, json: bool) -> anyhow::Result<()> {
    if !(0.1..=600.0).contains(&secs) {
        anyhow::bail!("--secs {secs}: allowed 0.1 to 600 seconds");
    }
    let online = slaswitch_datapath::pmd::online_cores();
    if core >= online {
        anyhow::bail!("--core {core}: this machine has cores 0 to {}", online - 1);
    }
    let noise = slaswitch_testbed::host_noise::measure(core, secs)?;
    match json {
        true => println!("{}", serde_json::to_string_pretty(&noise)?),
        false => println!(
            "{:.1} s spinning on {}.",
            noise.secs,
            slaswitch_testbed::host_noise::describe(std::slice::from_ref(&noise))
        ),
    }
    Ok(())
}

fn core_latency(cores: &[usize], ms: u64, json: bool) -> anyhow::Result<()> {
    if !(1..=60_000).contains(&ms) {
        anyhow::bail!("--ms {ms}: allowed 1 to 60000 ms");
    }
    let online = slaswitch_datapath::pmd::online_cores();
    let pair = match *cores {
        [a, b] if a != b && a.max(b) < online => [a, b],
        _ => anyhow::bail!(
            "--cores {}: two different cores of this machine's 0 to {} are needed",
            cores.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
            online - 1
        ),
    };
    let l = slaswitch_testbed::core_latency::measure(pair, std::time::Duration::from_millis(ms))?;
    match json {
        true => println!("{}", serde_json::to_string_pretty(&l)?),
        false => println!(
            "cores {} and {}: a cache line's round trip {:.0} ns (median of {} samples; fastest {:.0} ns)",
            l.cores[0], l.cores[1], l.round_trip_ns, l.samples, l.min_round_trip_ns
        ),
    }
    Ok(())
}

fn shield(pmd_cores: &[usize], command: &[String]) -> anyhow::Result<i32> {
    let online = slaswitch_datapath::pmd::online_cores();
    if let Some(core) = pmd_cores.iter().find(|&&c| c >= online) {
        anyhow::bail!("--pmd-cores {core}: this machine has cores 0 to {}", online - 1);
    }
    if (0..online).all(|c| pmd_cores.contains(&c)) {
        anyhow::bail!("--pmd-cores {pmd_cores:?}: every core of this machine; at least one must stay for the rest");
    }
    let shield = slaswitch_testbed::core_shield::CoreShield::raise(pmd_cores);
    eprintln!(
        "slaswitch experiment shield: {} threads moved off cores {pmd_cores:?} ({} per-CPU kernel threads stay)",
        shield.moved(),
        shield.refused
    );
    let (program, args) = command.split_first().expect("clap requires a command");
    let mut child = std::process::Command::new(program)
        .args(args)
        .env("SLASWITCH_SHIELDED_THREADS", shield.moved().to_string())
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    slaswitch_testbed::core_shield::forward_stop_signals(child.id());
    let status = child.wait().with_context(|| format!("waiting for {program}"))?;
    drop(shield);
    // A command a signal ended exits as a shell reports it: 128 plus the signal.
    Ok(status.code().unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)))
}

/// This program's folder, where slaswitchd, slaswitch and slaswitch-tenant are built too.
fn tools_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find this program")?;
    exe.parent().map(PathBuf::from).with_context(|| format!("{} has no folder", exe.display()))
}
