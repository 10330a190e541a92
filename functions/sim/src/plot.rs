//! SVG plots (plotters): capacity over time per strategy, and the headroom sweep.

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::metrics::Report;

#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    /// The setting varied (`headroom.percent`, `headroom.min` or `headroom.max`).
    pub setting: &'static str,
    pub value: u32,
    pub cost: f64,
    pub pod_wait_p95_s: f64,
    pub mean_spare_capacity_pct: f64,
    /// Share of the run in which `headroom.max` held the pause pods below the percent.
    pub held_at_max_pct: f64,
    /// Share of the run in which `headroom.min` held them above it.
    pub held_at_min_pct: f64,
    /// Each seed's own figures (the means above are over these).
    pub runs: Vec<SweepRun>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SweepRun {
    pub seed: u64,
    pub cost: f64,
    pub pod_wait_p95_s: f64,
    /// The p95 first-start wait of each five-minute window with starts (see
    /// [`Report::window_wait_p95_s`]).
    pub window_wait_p95_s: Vec<f64>,
    /// With several pools, each pool's p95 first-start wait, in the scenario's order (see
    /// [`Report::waits_by_pool`]; `None`: no pod started in it): each pool's wait target
    /// is its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pool_wait_p95_s: Vec<Option<f64>>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {message}")]
pub struct PlotError {
    path: String,
    message: String,
}

fn err(path: &Path) -> impl Fn(String) -> PlotError + '_ {
    move |message| PlotError { path: path.display().to_string(), message }
}

/// A plotted series: its label, colour and value per sample.
type Line = (&'static str, RGBColor, fn(&crate::Sample) -> u32);

type Panel<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// A panel's chart: hours across, `y_desc` up to `top`.
fn hourly_chart<'a, 'b>(
    panel: &'a Panel<'b>,
    caption: String,
    hours: f64,
    top: f64,
    y_desc: &str,
) -> Result<
    ChartContext<
        'a,
        SVGBackend<'b>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    String,
> {
    let mut chart = ChartBuilder::on(panel)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d(0f64..hours, 0f64..top)
        .map_err(|x| x.to_string())?;
    chart.configure_mesh().x_desc("hours").y_desc(y_desc).draw().map_err(|x| x.to_string())?;
    Ok(chart)
}

/// One panel per strategy: spot and on-demand nodes, pending pods and headroom pods;
/// with a wait target, a second panel per strategy: the target and the p95 first-start
/// wait of each five minutes.
pub fn timeline(path: &Path, scenario: &str, reports: &[Report], target_s: Option<f64>) -> Result<(), PlotError> {
    let e = err(path);
    let rows = reports.len() * if target_s.is_some() { 2 } else { 1 };
    let root = SVGBackend::new(path, (1000, 300 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let all = root.split_evenly((rows, 1));
    let (panels, wait_panels) = match target_s {
        Some(_) => {
            let (counts, waits): (Vec<_>, Vec<_>) = all.iter().enumerate().partition(|(i, _)| i % 2 == 0);
            (
                counts.into_iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
                waits.into_iter().map(|(_, p)| p.clone()).collect(),
            )
        }
        None => (all, Vec::new()),
    };
    let hours = reports.iter().flat_map(|r| r.series.last()).map(|s| f64::from(s.minute) / 60.0).fold(1.0, f64::max);
    let top = reports
        .iter()
        .flat_map(|r| r.series.iter())
        .map(|s| s.spot_nodes.max(s.on_demand_nodes).max(s.pending_pods).max(s.headroom_pods))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;
    let lines: [Line; 4] = [
        ("spot nodes", RGBColor(31, 119, 180), |s| s.spot_nodes),
        ("on-demand nodes", RGBColor(214, 39, 40), |s| s.on_demand_nodes),
        ("pending pods", RGBColor(255, 127, 14), |s| s.pending_pods),
        ("headroom pods", RGBColor(44, 160, 44), |s| s.headroom_pods),
    ];
    for (panel, report) in panels.iter().zip(reports) {
        let mut chart =
            hourly_chart(panel, format!("{scenario}: {}", report.strategy), hours, top, "count").map_err(&e)?;
        for (label, color, value) in lines {
            chart
                .draw_series(LineSeries::new(
                    report.series.iter().map(|s| (f64::from(s.minute) / 60.0, f64::from(value(s)))),
                    color.stroke_width(2),
                ))
                .map_err(|x| e(x.to_string()))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|x| e(x.to_string()))?;
    }
    if let Some(target) = target_s {
        let top = reports
            .iter()
            .flat_map(|r| r.series.iter())
            .filter_map(|s| s.recent_wait_p95_ms)
            .map(|ms| ms as f64 / 1000.0)
            .fold(target, f64::max)
            * 1.1;
        for (panel, report) in wait_panels.iter().zip(reports) {
            let caption = format!("{scenario}: {}, first-start wait", report.strategy);
            let mut chart = hourly_chart(panel, caption, hours, top, "seconds").map_err(&e)?;
            let target_color = RGBColor(148, 103, 189);
            chart
                .draw_series(LineSeries::new([(0.0, target), (hours, target)], target_color.stroke_width(2)))
                .map_err(|x| e(x.to_string()))?
                .label("target (p95)")
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], target_color.stroke_width(2)));
            let wait_color = RGBColor(255, 127, 14);
            chart
                .draw_series(
                    report
                        .series
                        .iter()
                        .filter_map(|s| Some((f64::from(s.minute) / 60.0, s.recent_wait_p95_ms? as f64 / 1000.0)))
                        .map(|point| Circle::new(point, 2, wait_color.filled())),
                )
                .map_err(|x| e(x.to_string()))?
                .label("p95 wait of the last 5 minutes' starts")
                .legend(move |(x, y)| Circle::new((x + 9, y), 3, wait_color.filled()));
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|x| e(x.to_string()))?;
        }
    }
    root.present().map_err(|x| e(x.to_string()))
}

/// Cost against p95 pod wait, one point per headroom percent.
pub fn sweep(path: &Path, scenario: &str, points: &[SweepPoint]) -> Result<(), PlotError> {
    let e = err(path);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let (cmin, cmax) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| (lo.min(p.cost), hi.max(p.cost)));
    let wmax = points.iter().map(|p| p.pod_wait_p95_s).fold(1.0, f64::max);
    let pad = ((cmax - cmin) * 0.1).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{scenario}: cost vs p95 pod wait by {}", points.first().map_or("headroom", |p| p.setting)),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d((cmin - pad)..(cmax + pad), 0f64..wmax * 1.15)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("cost ($ per run)")
        .y_desc("p95 pod wait (s)")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series(LineSeries::new(points.iter().map(|p| (p.cost, p.pod_wait_p95_s)), blue.stroke_width(2)))
        .map_err(|x| e(x.to_string()))?;
    chart
        .draw_series(points.iter().map(|p| {
            EmptyElement::at((p.cost, p.pod_wait_p95_s))
                + Circle::new((0, 0), 4, blue.filled())
                + Text::new(label(p), (6, -12), ("sans-serif", 13))
        }))
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))
}

fn label(p: &SweepPoint) -> String {
    match p.setting {
        "headroom.percent" => format!("{}%", p.value),
        _ => p.value.to_string(),
    }
}
