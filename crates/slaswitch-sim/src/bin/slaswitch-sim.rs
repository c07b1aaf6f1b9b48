//! slaswitch-sim: studies on the switch's own QoS code.
//!
//!   slaswitch-sim overcommit --vms 16 --utilization 0.10,0.15 --max-oc 10 [--max-failure 0.05]
//!       [--step 0.5] [--samples 100000] [--seed 1] [--out DIR] [--json]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slaswitch_sim::overcommit::{self, Study};

#[derive(Parser)]
#[command(name = "slaswitch-sim", version, about = "Simulations on slaswitch's QoS code (seed 003's over-commitment)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Guarantee failure against over-commitment (seed 003 Fig. 2, Eq. 2), with the largest
    /// over-commitment per utilization for a failure rate
    Overcommit {
        /// VMs per server, each with the same guarantee
        #[arg(long, default_value_t = 16)]
        vms: u32,
        /// Server utilizations without over-commitment, comma-separated (0.10 is 10%)
        #[arg(long, value_delimiter = ',', default_value = "0.10,0.15")]
        utilization: Vec<f64>,
        /// The sweep's largest over-commitment ratio
        #[arg(long = "max-oc", default_value_t = 10.0)]
        max_oc: f64,
        /// The table's step
        #[arg(long, default_value_t = 0.5)]
        step: f64,
        /// The failure rate the answers are for (0.05 is 5%)
        #[arg(long = "max-failure", default_value_t = 0.05)]
        max_failure: f64,
        /// Monte Carlo servers drawn per point to check Eq. 2 (0: none)
        #[arg(long, default_value_t = 100_000)]
        samples: u64,
        /// Seed of the Monte Carlo draws
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where the plot goes
        #[arg(long, default_value = "results/overcommit")]
        out: PathBuf,
        /// Print the findings as JSON
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let Command::Overcommit { vms, utilization, max_oc, step, max_failure, samples, seed, out, json } =
        Cli::parse().command;
    let study = Study { vms, utilizations: utilization, max_ratio: max_oc, step, max_failure, samples, seed };
    if let Err(e) = study.validate() {
        eprintln!("slaswitch-sim overcommit: {e}");
        return ExitCode::from(1);
    }
    let findings = overcommit::run(&study);
    let plot = match overcommit::plot(&study, &findings, &out) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("slaswitch-sim overcommit: the plot: {e}");
            return ExitCode::from(1);
        }
    };
    if json {
        let doc = serde_json::json!({"findings": findings, "plot": plot});
        println!("{}", serde_json::to_string_pretty(&doc).expect("serializable"));
    } else {
        print!("{}", overcommit::render(&findings));
        println!("plot: {}", plot.display());
    }
    ExitCode::SUCCESS
}
