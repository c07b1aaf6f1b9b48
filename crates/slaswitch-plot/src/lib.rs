//! PNG charts for the reports of the test bed, the simulator and the bill: lines over time (one
//! panel per switch, phase boundaries marked), lines over a sweep, grouped bars and latency
//! boxes. Text is drawn with DejaVu Sans from Debian's fonts-dejavu-core, which
//! `scripts/install-deps` and the test bed's preflight install.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// The font plots are drawn with (Debian's `fonts-dejavu-core`).
pub const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

static FONT_ONCE: Once = Once::new();

/// Why a chart was not drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The font is missing or unreadable.
    #[error("{FONT}: {why} (apt-get install fonts-dejavu-core)")]
    Font {
        /// What is wrong with it.
        why: String,
    },
    /// plotters could not draw or write the file.
    #[error("drawing {path}: {why}")]
    Draw {
        /// The chart's file.
        path: String,
        /// plotters' error.
        why: String,
    },
}

fn ensure_font() -> Result<(), PlotError> {
    let mut result = Ok(());
    FONT_ONCE.call_once(|| match std::fs::read(FONT) {
        Ok(bytes) => {
            // The font lives as long as the process: plotters keeps a 'static reference.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if register_font("sans-serif", FontStyle::Normal, bytes).is_err() {
                result = Err(PlotError::Font { why: "not a font plotters can read".into() });
            }
        }
        Err(e) => result = Err(PlotError::Font { why: e.to_string() }),
    });
    if !Path::new(FONT).exists() {
        return Err(PlotError::Font { why: "missing".into() });
    }
    result
}

/// One line of a plot.
pub struct Series {
    /// Its legend.
    pub label: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

/// One panel of a figure: a title and its lines.
pub struct Panel {
    /// Its title.
    pub title: String,
    /// Its lines.
    pub series: Vec<Series>,
    /// x positions of vertical markers (phase boundaries).
    pub markers: Vec<f64>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// A title cut to `chars` characters so it fits the image.
fn fit(title: &str, chars: usize) -> String {
    if title.chars().count() <= chars {
        return title.to_string();
    }
    title.chars().take(chars - 3).collect::<String>() + "..."
}

/// Grouped charts put group i on [i, i + 1): its name is written under i + 0.5, nothing
/// elsewhere.
fn group_label(names: &[String], x: f64) -> String {
    if (x.fract() - 0.5).abs() > 0.01 {
        return String::new();
    }
    names.get(x.floor() as usize).cloned().unwrap_or_default()
}

/// plotters' error, with the chart it was drawing.
fn drawing(path: &Path, why: impl std::fmt::Display) -> PlotError {
    PlotError::Draw { path: path.display().to_string(), why: why.to_string() }
}

/// Line charts, one panel per entry, stacked vertically, sharing axis labels.
pub fn lines(path: &Path, title: &str, x_label: &str, y_label: &str, panels: &[Panel]) -> Result<(), PlotError> {
    ensure_font()?;
    let height = 80 + 320 * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| drawing(path, x))?;
    let root = root.titled(&fit(title, 110), ("sans-serif", 20)).map_err(|x| drawing(path, x))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let xs = panel.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
        let ys = panel.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let (x_min, x_max) = xs.fold((0.0f64, 1.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let y_max = ys.fold(0.0f64, f64::max).max(1e-9) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x_min..x_max, 0.0..y_max)
            .map_err(|x| drawing(path, x))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|x| drawing(path, x))?;
        for &m in &panel.markers {
            chart
                .draw_series(LineSeries::new(vec![(m, 0.0), (m, y_max)], BLACK.mix(0.3).stroke_width(1)))
                .map_err(|x| drawing(path, x))?;
        }
        for (i, s) in panel.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
                .map_err(|x| drawing(path, x))?
                .label(&s.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        if !panel.series.is_empty() {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|x| drawing(path, x))?;
        }
    }
    root.present().map_err(|x| drawing(path, x))?;
    Ok(())
}

/// Grouped bars: for each group (e.g. a VM), one bar per member (e.g. a switch).
pub fn bars(
    path: &Path,
    title: &str,
    y_label: &str,
    members: &[String],
    groups: &[(String, Vec<f64>)],
) -> Result<(), PlotError> {
    ensure_font()?;
    let root = BitMapBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| drawing(path, x))?;
    let title = fit(title, 110);
    let y_max = groups.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0f64, f64::max).max(1e-9) * 1.15;
    let n = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(&title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..y_max)
        .map_err(|x| drawing(path, x))?;
    let names: Vec<String> = groups.iter().map(|(g, _)| g.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_label)
        .x_labels(groups.len().max(1) * 2 + 1)
        .x_label_formatter(&|x| group_label(&names, *x))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| drawing(path, x))?;
    let width = 0.8 / members.len().max(1) as f64;
    for (mi, member) in members.iter().enumerate() {
        let color = COLORS[mi % COLORS.len()];
        chart
            .draw_series(groups.iter().enumerate().filter_map(|(gi, (_, values))| {
                let v = *values.get(mi)?;
                let x0 = gi as f64 + 0.1 + mi as f64 * width;
                Some(Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], color.filled()))
            }))
            .map_err(|x| drawing(path, x))?
            .label(member)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|x| drawing(path, x))?;
    root.present().map_err(|x| drawing(path, x))?;
    Ok(())
}

/// One latency box: the box spans p50 to p90, the whisker reaches p99 (microseconds).
pub struct LatencyBox {
    /// Median, microseconds.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Latency boxes on a log scale: for each group (e.g. a sweep step), one box per member
/// (e.g. a switch).
pub fn latency_boxes(
    path: &Path,
    title: &str,
    x_label: &str,
    members: &[String],
    groups: &[(String, Vec<Option<LatencyBox>>)],
) -> Result<(), PlotError> {
    ensure_font()?;
    let root = BitMapBackend::new(path, (1200, 550)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| drawing(path, x))?;
    let title = fit(title, 110);
    let values = groups.iter().flat_map(|(_, b)| b.iter().flatten().flat_map(|b| [b.p50, b.p99]));
    let lo = values.clone().fold(f64::INFINITY, f64::min).max(0.1) / 1.5;
    let hi = values.fold(1.0f64, f64::max) * 1.5;
    // No value at all would give an empty log range, on which the mesh never ends.
    let lo = if lo.is_finite() && lo < hi { lo } else { hi / 100.0 };
    let n = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(&title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..n, (lo..hi).log_scale())
        .map_err(|x| drawing(path, x))?;
    let names: Vec<String> = groups.iter().map(|(g, _)| g.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(x_label)
        .y_desc("one-way latency, microseconds (log)")
        .x_labels(groups.len().max(1) * 2 + 1)
        .x_label_formatter(&|x| group_label(&names, *x))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| drawing(path, x))?;
    let width = 0.8 / members.len().max(1) as f64;
    for (mi, member) in members.iter().enumerate() {
        let color = COLORS[mi % COLORS.len()];
        let mut shapes: Vec<DynElement<BitMapBackend, (f64, f64)>> = Vec::new();
        for (gi, (_, boxes)) in groups.iter().enumerate() {
            let Some(Some(b)) = boxes.get(mi) else { continue };
            let x0 = gi as f64 + 0.1 + mi as f64 * width;
            let (x1, xm) = (x0 + width * 0.9, x0 + width * 0.45);
            shapes.push(Rectangle::new([(x0, b.p50), (x1, b.p90)], color.mix(0.5).filled()).into_dyn());
            shapes.push(PathElement::new(vec![(xm, b.p90), (xm, b.p99)], color.stroke_width(2)).into_dyn());
            shapes.push(
                PathElement::new(vec![(x0 + width * 0.25, b.p99), (x0 + width * 0.65, b.p99)], color.stroke_width(2))
                    .into_dyn(),
            );
            shapes.push(PathElement::new(vec![(x0, b.p50), (x1, b.p50)], BLACK.stroke_width(2)).into_dyn());
        }
        chart
            .draw_series(shapes)
            .map_err(|x| drawing(path, x))?
            .label(member)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.mix(0.5).filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|x| drawing(path, x))?;
    root.present().map_err(|x| drawing(path, x))?;
    Ok(())
}
