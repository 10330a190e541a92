use chrono::{TimeZone, Utc};

use super::*;

const GI: u64 = 1 << 30;

fn gpu(cpu: u64, mem_gi: u64, gpus: u64) -> PodShape {
    let mut s = PodShape::new(cpu, mem_gi * GI);
    s.extended.insert("nvidia.com/gpu".into(), gpus);
    s
}

fn count(shape: PodShape, kind: WorkloadKind, started: u32, waiting: u32) -> ShapeCount {
    ShapeCount { shape, kind, started, waiting }
}

#[test]
fn a_shape_fits_only_where_every_resource_fits() {
    let job = gpu(4000, 14, 1);
    assert!(job.fits_in(&gpu(4000, 14, 1)));
    assert!(!job.fits_in(&PodShape::new(8000, 32 * GI)), "no GPU in the hole");
    assert!(!PodShape::new(4000, 14 * GI).fits_in(&PodShape::new(2000, 32 * GI)));
    assert!(PodShape::new(2000, 8 * GI).fits_in(&job), "a GPU hole takes a pod without one");
    assert_eq!(job.covering(&PodShape::new(6000, 8 * GI)), gpu(6000, 14, 1));
    assert_eq!(job.to_string(), "4 CPU / 14Gi + 1 nvidia.com/gpu");
}

#[test]
fn the_ml_pool_s_room_goes_into_slots_its_training_jobs_fit() {
    // The pool: inference 2 CPU / 8Gi, training jobs 4 CPU / 14Gi. 32 CPU of
    // room as 2-CPU pause pods left 5 holes a job fits; in shapes every job has one.
    let inference = PodShape::new(2000, 8 * GI);
    let training = PodShape::new(4000, 14 * GI);
    let arrivals =
        vec![(inference.clone(), WorkloadKind::LongRunning, 8.0), (training.clone(), WorkloadKind::Job, 6.0)];
    let shares = shares(&arrivals).expect("arrivals");
    assert_eq!(shares.shapes.len(), 2);
    assert_eq!(shares.shapes[0].0, training, "largest first");
    let (t, i) = (shares.shapes[0].1, shares.shapes[1].1);
    assert!((t + i - 1.0).abs() < 1e-9);
    assert!(t > i, "six 4-CPU jobs take more room than eight 2-CPU pods: {t} vs {i}");
    let slots = place(Room { cpu_millis: 32_000.0, memory_bytes: 0.0 }, &shares);
    assert_eq!(slots[0].shape, training);
    assert!(slots[0].pods >= 4, "{slots:?}");
    assert!(slots[0].serves.contains("Job pods"), "{}", slots[0].serves);
    let held: u64 = slots.iter().map(|s| u64::from(s.pods) * s.shape.cpu_millis).sum();
    assert!((32_000..32_000 + 4_000 + 2_000).contains(&held), "room covered, at most a pod over per shape: {held}");
}

#[test]
fn one_shape_places_the_room_as_the_percent_always_did() {
    let unit = PodShape::new(1000, 2 * GI);
    let shares = shares(&[(unit.clone(), WorkloadKind::LongRunning, 3.0)]).unwrap();
    for (cpu, mem, pods) in [(0.0, 0.0, 0), (1000.0, 0.0, 1), (2500.0, 0.0, 3), (1000.0, 10.0 * GI as f64, 5)] {
        let slots = place(Room { cpu_millis: cpu, memory_bytes: mem }, &shares);
        assert_eq!(slots[0].pods, pods, "{cpu} m, {mem} B");
    }
}

#[test]
fn rare_shapes_do_not_get_a_deployment_of_their_own() {
    let web = PodShape::new(500, GI);
    let huge = PodShape::new(30_000, 100 * GI);
    let s = shares(&[(web.clone(), WorkloadKind::LongRunning, 99.0), (huge.clone(), WorkloadKind::Job, 1.0)]).unwrap();
    assert_eq!(s.shapes.len(), 1, "1 % of arrivals is within the 5 % a p95 lets wait");
    assert_eq!(s.shapes[0].0, web);
    assert_eq!(s.left_out, vec![huge]);
}

#[test]
fn many_shapes_merge_into_three_deployments_covering_them_all() {
    let arrivals: Vec<_> = [(500, 1), (600, 1), (2000, 8), (2100, 6), (8000, 30)]
        .iter()
        .map(|&(cpu, gi)| (PodShape::new(cpu, gi * GI), WorkloadKind::LongRunning, 10.0))
        .collect();
    let s = shares(&arrivals).unwrap();
    assert_eq!(s.shapes.len(), MAX_SLOT_SHAPES);
    assert!(s.left_out.is_empty());
    for (shape, _, _) in &arrivals {
        assert!(s.shapes.iter().any(|(c, _, _)| shape.fits_in(c)), "{shape} has a hole");
    }
    assert!(s.shapes.iter().any(|(c, _, _)| *c == PodShape::new(600, GI)), "near shapes merged: {:?}", s.shapes);
}

#[test]
fn the_mix_remembers_a_daily_burst_and_forgets_a_gone_workload() {
    let t0 = Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap();
    let training = PodShape::new(4000, 14 * GI);
    let mut mix = ShapeMix::default();
    mix.observe(&[count(training.clone(), WorkloadKind::Job, 20, 3)], t0, chrono_tz::Tz::UTC);
    assert_eq!(mix.arrivals()[0].2, 23.0);
    // An older report, delivered late, is passed over.
    mix.observe(&[count(training.clone(), WorkloadKind::Job, 100, 0)], t0 - Duration::minutes(1), chrono_tz::Tz::UTC);
    assert_eq!(mix.arrivals()[0].2, 23.0);
    mix.observe(&[], t0 + Duration::hours(24), chrono_tz::Tz::UTC);
    let next_morning = mix.arrivals()[0].2;
    assert!((14.0..14.2).contains(&next_morning), "20 × 2^-½ ≈ 14.1, waits gone: {next_morning}");
    mix.observe(&[], t0 + Duration::days(60), chrono_tz::Tz::UTC);
    assert!(mix.entries.is_empty(), "{mix:?}");
}

#[test]
fn a_report_is_bounded_and_says_each_shape_once() {
    let many: Vec<_> =
        (1..=12).map(|i| count(PodShape::new(i * 100, GI), WorkloadKind::LongRunning, i as u32, 0)).collect();
    let kept = most_frequent(many.clone());
    assert_eq!(kept.len(), MAX_SHAPES_REPORTED);
    assert_eq!(kept[0].shape.cpu_millis, 1200, "most pods first");
    assert_eq!(check_report(&kept), Ok(()));
    assert_eq!(check_report(&many), Err(ShapeReportError::TooMany(12)));
    let twice = vec![many[0].clone(), many[0].clone()];
    assert!(matches!(check_report(&twice), Err(ShapeReportError::Repeated(_))));
}
