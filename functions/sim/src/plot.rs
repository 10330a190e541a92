//! SVG plots (plotters): capacity over time per strategy, and the headroom sweep.

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::metrics::Report;
use crate::Scenario;

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

/// A stretch of the scenario the timeline marks: a spot capacity loss or a storm, in
/// hours from its start, with what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Marked {
    pub label: String,
    pub from_h: f64,
    pub to_h: f64,
}

/// The scenario's spot capacity losses and storms, as the timeline marks them: losses of
/// the same stretch (several types at once) are one mark naming each.
pub fn marked(scenario: &Scenario) -> Vec<Marked> {
    let hours = |d: &ballast_core::units::HumanDuration| d.0.as_secs_f64() / 3600.0;
    let mut marks: Vec<Marked> = Vec::new();
    for loss in &scenario.spot.capacity_losses {
        let (from_h, to_h) = (hours(&loss.at), hours(&loss.at) + hours(&loss.duration));
        let what = match &loss.availability_zone {
            Some(zone) => format!("{} in {zone}", loss.instance_type),
            None => loss.instance_type.clone(),
        };
        match marks.iter_mut().find(|m| m.from_h == from_h && m.to_h == to_h && m.label.starts_with("no spot")) {
            Some(mark) => mark.label = format!("{}, {what}", mark.label),
            None => marks.push(Marked { label: format!("no spot: {what}"), from_h, to_h }),
        }
    }
    for storm in &scenario.spot.storms {
        let of = storm.instance_type.as_deref().unwrap_or("spot nodes");
        marks.push(Marked {
            label: format!("storm: {:.0}% of {of}", storm.fraction * 100.0),
            from_h: hours(&storm.at),
            to_h: hours(&storm.at) + hours(&storm.duration),
        });
    }
    marks.sort_by(|a, b| a.from_h.total_cmp(&b.from_h));
    marks
}

/// Shades each mark across a panel's height (`top`), its label at the top of its band,
/// and names the shading once in the panel's legend.
fn draw_marks<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    marks: &[Marked],
    top: f64,
) -> Result<(), String> {
    let shade = RGBColor(128, 128, 128);
    for (i, mark) in marks.iter().enumerate() {
        let band = Rectangle::new([(mark.from_h, 0.0), (mark.to_h, top)], shade.mix(0.18).filled());
        let series = chart.draw_series(std::iter::once(band)).map_err(|x| x.to_string())?;
        if i == 0 {
            series
                .label("spot capacity loss / storm")
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], shade.mix(0.3).filled()));
        }
        // Labels of marks close together step down, so they do not overwrite each other.
        let y = top * (0.97 - 0.06 * (i % 4) as f64);
        let text = Text::new(mark.label.clone(), (mark.from_h, y), ("sans-serif", 12).into_font().color(&BLACK));
        chart.draw_series(std::iter::once(text)).map_err(|x| x.to_string())?;
    }
    Ok(())
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

/// One panel per strategy, named with the seed its run had: spot and on-demand nodes,
/// pending pods and headroom pods; with a wait target, a second panel per strategy: the
/// target and the p95 first-start wait of each five minutes. Every panel shades the
/// scenario's spot capacity losses and storms.
pub fn timeline(
    path: &Path,
    scenario: &Scenario,
    seed: u64,
    reports: &[Report],
    target_s: Option<f64>,
) -> Result<(), PlotError> {
    let e = err(path);
    let marks = marked(scenario);
    let name = &scenario.name;
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
        let caption = format!("{name}: {}, seed {seed}", report.strategy);
        let mut chart = hourly_chart(panel, caption, hours, top, "count").map_err(&e)?;
        draw_marks(&mut chart, &marks, top).map_err(&e)?;
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
            let caption = format!("{name}: {}, first-start wait, seed {seed}", report.strategy);
            let mut chart = hourly_chart(panel, caption, hours, top, "seconds").map_err(&e)?;
            draw_marks(&mut chart, &marks, top).map_err(&e)?;
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

/// Cost against p95 pod wait, one point per value of the setting swept, each the mean
/// over `seeds` (named in the caption).
pub fn sweep(path: &Path, scenario: &str, seeds: &[u64], points: &[SweepPoint]) -> Result<(), PlotError> {
    let e = err(path);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let (cmin, cmax) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| (lo.min(p.cost), hi.max(p.cost)));
    let wmax = points.iter().map(|p| p.pod_wait_p95_s).fold(1.0, f64::max);
    let pad = ((cmax - cmin) * 0.1).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{scenario}: cost vs p95 pod wait by {}, {}",
                points.first().map_or("headroom", |p| p.setting),
                seeds_named(seeds)
            ),
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

/// `seed 42`, or `mean of 10 seeds (42–51)`.
fn seeds_named(seeds: &[u64]) -> String {
    match seeds {
        [one] => format!("seed {one}"),
        [first, .., last] => format!("mean of {} seeds ({first}–{last})", seeds.len()),
        [] => String::new(),
    }
}

fn label(p: &SweepPoint) -> String {
    match p.setting {
        "headroom.percent" => format!("{}%", p.value),
        _ => p.value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{simulate, Strategy};

    #[test]
    fn capacity_losses_of_one_stretch_are_one_mark_and_storms_their_own() {
        let scenario = Scenario::built_in("business-day").unwrap();
        let marks = marked(&scenario);
        assert_eq!(marks.len(), 2, "{marks:?}");
        assert_eq!(marks[0].label, "no spot: m6i.2xlarge, m5.2xlarge");
        assert_eq!((marks[0].from_h, marks[0].to_h), (8.25, 9.0));
        assert_eq!(marks[1].label, "storm: 30% of spot nodes");
        assert!((marks[1].to_h - marks[1].from_h - 10.0 / 60.0).abs() < 1e-9);
    }

    #[test]
    fn the_timeline_names_its_seed_and_marks_the_scenarios_events() {
        let scenario = Scenario::built_in("spot-heavy").unwrap();
        let report = simulate(&scenario, Strategy::Ballast, 7, &mut |_| {});
        let path = std::env::temp_dir().join(format!("ballast-plot-marks-{}.svg", std::process::id()));
        timeline(&path, &scenario, 7, &[report], None).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.contains("spot-heavy: CA + Ballast, seed 7"), "the caption names the seed");
        for mark in marked(&scenario) {
            assert!(svg.contains(&mark.label), "{} not in the plot", mark.label);
        }
        assert!(svg.contains("no spot: m6i.2xlarge in eu-west-3a") && svg.contains("storm: 40% of spot nodes"));
    }
}
