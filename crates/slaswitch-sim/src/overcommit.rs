//! `slaswitch-sim overcommit`: seed 003's Fig. 2 (failure rate against over-commitment) and the
//! question a provider asks of it: how far may guarantees be over-committed at a utilization
//! for a failure rate? Analytical (Eq. 2), each point checked by Monte Carlo.

use std::path::{Path, PathBuf};

use serde::Serialize;
use slaswitch_plot::{lines, Panel, Series};
use slaswitch_qos::overcommit::{max_ratio, Overcommit};

use crate::monte_carlo;
use crate::SimError;

/// What to study.
#[derive(Clone, Debug)]
pub struct Study {
    /// VMs per server.
    pub vms: u32,
    /// Server utilizations without over-commitment (`ρ`), each in (0, 1].
    pub utilizations: Vec<f64>,
    /// The sweep's largest over-commitment ratio (from 1).
    pub max_ratio: f64,
    /// The sweep's step.
    pub step: f64,
    /// The failure rate the answers are for.
    pub max_failure: f64,
    /// Monte Carlo samples per point (0: none).
    pub samples: u64,
    /// Seed of the Monte Carlo draws.
    pub seed: u64,
}

impl Study {
    /// Checks every setting; the error names the option, the value and what is allowed.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |option: &'static str, value: String, allowed: &'static str| {
            Err(SimError::Option { option, value, allowed })
        };
        if !(1..=100_000).contains(&self.vms) {
            return bad("vms", self.vms.to_string(), "from 1 to 100000 VMs");
        }
        if self.utilizations.is_empty() {
            return bad("utilization", String::new(), "at least one utilization, e.g. 0.10,0.15");
        }
        if let Some(u) = self.utilizations.iter().find(|u| !(u.is_finite() && **u > 0.0 && **u <= 1.0)) {
            return bad("utilization", u.to_string(), "each above 0 and at most 1 (a share of the guarantees)");
        }
        if !(self.max_ratio.is_finite() && (1.0..=1000.0).contains(&self.max_ratio)) {
            return bad("max-oc", self.max_ratio.to_string(), "from 1 to 1000");
        }
        if !(self.step.is_finite() && self.step > 0.0 && self.step <= self.max_ratio) {
            return bad("step", self.step.to_string(), "above 0 and at most --max-oc");
        }
        if !(self.max_failure.is_finite() && self.max_failure > 0.0 && self.max_failure < 1.0) {
            return bad("max-failure", self.max_failure.to_string(), "above 0 and below 1 (0.05 is 5%)");
        }
        if self.samples > 100_000_000 {
            return bad("samples", self.samples.to_string(), "at most 100000000 per point");
        }
        Ok(())
    }

    /// The sweep's ratios: 1, 1 + step, ... up to `max_ratio`.
    fn ratios(&self) -> Vec<f64> {
        let n = ((self.max_ratio - 1.0) / self.step + 1e-9).floor() as usize;
        (0..=n).map(|i| 1.0 + i as f64 * self.step).collect()
    }
}

/// One point of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The over-commitment ratio `δ`.
    pub ratio: f64,
    /// The utilization `ρ`.
    pub utilization: f64,
    /// Eq. 2.
    pub failure: f64,
    /// The Monte Carlo estimate and its standard error, when sampled.
    pub sampled: Option<f64>,
    /// See `sampled`.
    pub sampled_std_error: Option<f64>,
}

/// The answer for one utilization.
#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    /// The utilization `ρ`.
    pub utilization: f64,
    /// The largest ratio whose failure stays at or under the study's rate (`None`: not even 1).
    pub max_ratio: Option<f64>,
}

/// What a study found.
#[derive(Clone, Debug, Serialize)]
pub struct Findings {
    /// VMs per server.
    pub vms: u32,
    /// The failure rate the answers are for.
    pub max_failure: f64,
    /// Monte Carlo samples per point.
    pub samples: u64,
    /// Every point, by utilization then ratio.
    pub points: Vec<Point>,
    /// Per utilization.
    pub answers: Vec<Answer>,
}

/// Runs the study.
pub fn run(study: &Study) -> Findings {
    let mut points = Vec::new();
    for (u, &utilization) in study.utilizations.iter().enumerate() {
        for (i, ratio) in study.ratios().into_iter().enumerate() {
            let oc = Overcommit { vms: study.vms, utilization, ratio };
            let sampled = (study.samples > 0).then(|| {
                monte_carlo::failure_probability(&oc, study.samples, study.seed ^ ((u as u64) << 32 | i as u64))
            });
            points.push(Point {
                ratio,
                utilization,
                failure: oc.failure_probability(),
                sampled: sampled.map(|e| e.probability),
                sampled_std_error: sampled.map(|e| e.std_error),
            });
        }
    }
    let answers = study
        .utilizations
        .iter()
        .map(|&utilization| Answer {
            utilization,
            max_ratio: max_ratio(study.vms, utilization, study.max_failure, study.max_ratio),
        })
        .collect();
    Findings { vms: study.vms, max_failure: study.max_failure, samples: study.samples, points, answers }
}

/// The findings as a table and the answers, for a terminal.
pub fn render(f: &Findings) -> String {
    let mut out = format!(
        "SoftBW failure model (seed 003 Sec. 2.2, Eq. 2): {} VMs per server, independent exponential demands; \
         P(fail) = P(sum of demands > link)",
        f.vms
    );
    out += &if f.samples > 0 {
        format!("; Monte Carlo check, {} servers drawn per point\n\n", f.samples)
    } else {
        "\n\n".to_string()
    };
    let utilizations: Vec<f64> = f.answers.iter().map(|a| a.utilization).collect();
    out += "over-commitment";
    for u in &utilizations {
        out += &format!(" | P(fail) at {:.0}%", u * 100.0);
        if f.samples > 0 {
            out += " (sampled)";
        }
    }
    out += "\n";
    let per_utilization = f.points.len() / utilizations.len().max(1);
    for i in 0..per_utilization {
        out += &format!("{:>14.2}x", f.points[i].ratio);
        for u in 0..utilizations.len() {
            let p = &f.points[u * per_utilization + i];
            out += &format!(" | {:>8.4}%", p.failure * 100.0);
            if let Some(s) = p.sampled {
                out += &format!(" ({:>7.4}%)", s * 100.0);
            }
        }
        out += "\n";
    }
    out += &format!("\nlargest over-commitment with failure at or under {}%:\n", f.max_failure * 100.0);
    for a in &f.answers {
        out += &match a.max_ratio {
            Some(r) => format!("  utilization {:.0}%: {r:.2}x\n", a.utilization * 100.0),
            None => format!(
                "  utilization {:.0}%: none (even guarantees that fit the link fail more often)\n",
                a.utilization * 100.0
            ),
        };
    }
    out
}

/// Draws Fig. 2 into `dir/overcommit-failure.png` from a fine sweep of Eq. 2; returns its path.
pub fn plot(study: &Study, f: &Findings, dir: &Path) -> Result<PathBuf, SimError> {
    std::fs::create_dir_all(dir).map_err(SimError::write(dir))?;
    let fine = Study { step: (study.max_ratio - 1.0).max(0.01) / 200.0, samples: 0, ..study.clone() };
    let series = study
        .utilizations
        .iter()
        .map(|&utilization| Series {
            label: format!("utilization {:.0}%", utilization * 100.0),
            points: fine
                .ratios()
                .into_iter()
                .map(|ratio| (ratio, 100.0 * Overcommit { vms: study.vms, utilization, ratio }.failure_probability()))
                .collect(),
        })
        .collect();
    let panel = Panel {
        title: format!(
            "{} VMs; vertical lines: the largest over-commitment with failure at or under {}%",
            f.vms,
            f.max_failure * 100.0
        ),
        series,
        markers: f.answers.iter().filter_map(|a| a.max_ratio).collect(),
    };
    let path = dir.join("overcommit-failure.png");
    lines(
        &path,
        "Guarantee failure against over-commitment (seed 003 Eq. 2)",
        "over-commitment ratio",
        "failure rate, %",
        &[panel],
    )?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig2() -> Study {
        Study {
            vms: 16,
            utilizations: vec![0.10, 0.15],
            max_ratio: 10.0,
            step: 0.5,
            max_failure: 0.05,
            samples: 20_000,
            seed: 1,
        }
    }

    #[test]
    fn the_study_answers_the_papers_question() {
        let f = run(&fig2());
        assert_eq!(f.points.len(), 2 * 19);
        let answers: Vec<f64> = f.answers.iter().map(|a| a.max_ratio.unwrap()).collect();
        assert!((answers[0] - 6.9).abs() < 0.1 && (answers[1] - 4.6).abs() < 0.1, "{answers:?}");
        let text = render(&f);
        assert!(text.contains("utilization 10%: 6.9") && text.contains("utilization 15%: 4.6"), "{text}");
    }

    #[test]
    fn bad_settings_are_refused_with_the_option_value_and_range() {
        type Spoil = fn(&mut Study);
        let cases: [(Spoil, &str); 4] = [
            (|s| s.utilizations = vec![0.1, 1.5], "--utilization 1.5"),
            (|s| s.vms = 0, "--vms 0"),
            (|s| s.max_ratio = f64::NAN, "--max-oc NaN"),
            (|s| s.max_failure = 1.0, "--max-failure 1"),
        ];
        for (spoil, named) in cases {
            let mut s = fig2();
            spoil(&mut s);
            let e = s.validate().unwrap_err().to_string();
            assert!(e.starts_with(named), "{e}");
        }
        assert!(fig2().validate().is_ok());
    }
}
