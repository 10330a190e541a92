use chrono::{TimeZone, Utc};

use super::*;

const GI: u64 = 1 << 30;

/// A quota no placement here reaches.
fn no_quota() -> Quota {
    Quota { cpu_millis: u64::MAX, memory_bytes: u64::MAX, pause_pods: u32::MAX, unit: PodShape::default() }
}

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
    // The issue's pool: inference 2 CPU / 8Gi, training jobs 4 CPU / 14Gi. 32 CPU of
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
    let slots =
        place(Room { cpu_millis: 32_000.0, memory_bytes: 64.0 * GI as f64, units: 32.0 }, &shares, &[], &no_quota());
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
    // Room counted in unit pods is held in as many unit pods.
    for units in [0u32, 1, 3, 5] {
        let u = f64::from(units);
        let slots = place(
            Room { cpu_millis: u * 1000.0, memory_bytes: u * (2 * GI) as f64, units: u },
            &shares,
            &[],
            &no_quota(),
        );
        assert_eq!(slots[0].pods, units);
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

// ---- Review of `shapes` (issue 37) ----

/// A new shape that comes steadily (5 pods every 5 minutes) finds its way into a mix
/// already holding eight shapes that weigh days of pods.
#[test]
fn a_new_shape_arriving_steadily_enters_a_full_mix() {
    let tz = chrono_tz::Tz::UTC;
    let t0 = Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap();
    let mut mix = ShapeMix::default();
    let old: Vec<_> = (1..=8).map(|i| count(PodShape::new(i * 100, GI), WorkloadKind::LongRunning, 100, 0)).collect();
    mix.observe(&old, t0, tz);
    let new = PodShape::new(3000, 12 * GI);
    for k in 1..=288 {
        mix.observe(&[count(new.clone(), WorkloadKind::Job, 5, 0)], t0 + Duration::minutes(5 * k), tz);
    }
    let shapes: Vec<String> = mix.entries.iter().map(|e| format!("{} {}", e.shape, e.weight_milli)).collect();
    assert!(mix.entries.iter().any(|e| e.shape == new), "1440 pods a day of {new}, not in the mix: {shapes:?}");
}

/// Rare shapes together may be many pods: seven of 4.99 % each are a third of the pods,
/// and some of them join until no more than 5 % are left without a hole.
#[test]
fn rare_shapes_together_are_not_a_third_of_the_pods_left_without_a_hole() {
    let mut arrivals = vec![(PodShape::new(1000, 2 * GI), WorkloadKind::LongRunning, 65.0)];
    for i in 0..7u64 {
        arrivals.push((PodShape::new(2000 + i * 100, 8 * GI), WorkloadKind::Job, 4.99));
    }
    let s = shares(&arrivals).unwrap();
    let total: f64 = arrivals.iter().map(|a| a.2).sum();
    let held: f64 = arrivals.iter().filter(|a| s.shapes.iter().any(|c| a.0.fits_in(&c.0))).map(|a| a.2).sum();
    assert!(held / total >= 0.95, "{:.0} % of arriving pods have a hole: {:?}", held * 100.0 / total, s.shapes);
}

/// A memory-heavy shape holds the room its pods need, not the CPU-sized room in memory
/// several times over: room counted in 1 CPU / 2Gi pause pods by its memory is taken
/// back in the pool's own ratio before it is placed.
#[test]
fn a_memory_heavy_shape_holds_the_room_its_pods_need() {
    let heavy = PodShape::new(500, 16 * GI);
    let s = shares(&[(heavy.clone(), WorkloadKind::LongRunning, 10.0)]).unwrap();
    // 20 such pods: 10 CPU / 320Gi; 10 % of it is 16 pause pods of 1 CPU / 2Gi by memory.
    let room = Room::of_units(16, &PodShape::new(1000, 2 * GI), Some((10_000, 320 * GI)));
    assert_eq!((room.cpu_millis, room.memory_bytes), (1000.0, 32.0 * GI as f64));
    let slots = place(room, &s, &[], &no_quota());
    assert_eq!(slots[0].pods, 2, "10 % of 20 pods: {slots:?}");
}

/// GPU-sharing schedulers count an extended resource in thousands (HAMi's
/// `nvidia.com/gpumem` in MiB): such counts weigh as one device, or 10 % of pods asking
/// 3000 units would take all the room from the web pods that are 90 % of arrivals.
#[test]
fn an_extended_resource_counted_in_thousands_does_not_take_all_the_room() {
    let web = PodShape::new(500, GI);
    let mut shared = gpu(1000, 4, 1);
    shared.extended.insert("nvidia.com/gpumem".into(), 3000);
    let s = shares(&[(web.clone(), WorkloadKind::LongRunning, 90.0), (shared, WorkloadKind::Job, 10.0)]).unwrap();
    let web_share = s.shapes.iter().find(|x| x.0 == web).map_or(0.0, |x| x.1);
    assert!(web_share >= 0.25, "the web pods' share of the room: {web_share}");
}

/// A pod asking only `limits: { nvidia.com/gpu: 1 }` (NVIDIA's own examples) asks for
/// no CPU and no memory: its shape still gets pause pods.
#[test]
fn a_gpu_only_shape_gets_pause_pods() {
    let only_gpu = gpu(0, 0, 1);
    let s = shares(&[(only_gpu, WorkloadKind::Job, 10.0)]).unwrap();
    let slots = place(Room { cpu_millis: 10_000.0, memory_bytes: 20.0 * GI as f64, units: 10.0 }, &s, &[], &no_quota());
    assert!(slots.iter().map(|x| x.pods).sum::<u32>() > 0, "{slots:?}");
}

/// A web pod fits a listed 2 CPU / 8Gi / 1 GPU shape and a 16 CPU / 64Gi one: its room
/// goes to the one without a GPU, not to pause pods each holding a GPU it never asks for.
#[test]
fn pods_without_a_gpu_are_not_given_gpu_holes() {
    let gpu_shape = gpu(2000, 8, 1);
    let big_cpu = PodShape::new(16_000, 64 * GI);
    let web = PodShape::new(1000, 2 * GI);
    let arrivals = [(web, WorkloadKind::LongRunning, 50.0), (big_cpu.clone(), WorkloadKind::Job, 5.0)];
    let s = shares_among(vec![gpu_shape.clone(), big_cpu], &arrivals).unwrap();
    let gpu_share = s.shapes.iter().find(|x| x.0 == gpu_shape).map_or(0.0, |x| x.1);
    assert_eq!(gpu_share, 0.0, "no pod arriving asks for a GPU: {:?}", s.shapes);
}

/// Merging into three shapes weighs the pods each merge over-serves: two 5 % Job shapes
/// (8 and 10 CPU) merge, not the shape of 85 % of arrivals into a 1.5-CPU one.
#[test]
fn merging_weighs_the_pods_each_merge_over_serves() {
    let web = PodShape::new(1000, 2 * GI);
    let arrivals = [
        (web.clone(), WorkloadKind::LongRunning, 85.0),
        (PodShape::new(1500, 2 * GI), WorkloadKind::LongRunning, 5.0),
        (PodShape::new(8000, 16 * GI), WorkloadKind::Job, 5.0),
        (PodShape::new(10_000, 16 * GI), WorkloadKind::Job, 5.0),
    ];
    let s = shares(&arrivals).unwrap();
    assert!(s.shapes.iter().any(|x| x.0 == web), "85 % of pods keep their own hole: {:?}", s.shapes);
}

/// A report's shapes ask for a bounded number of extended resources: a device plugin
/// advertising a hundred made-up ones would otherwise grow the pool's record past its
/// bound.
#[test]
fn a_shape_s_extended_resources_are_bounded() {
    let hostile = |k: u64| {
        let mut s = PodShape::new(1000 + k, GI);
        for i in 0..100 {
            s.extended.insert(format!("x{k}-{i}.example.com/{}", "r".repeat(230)), 1);
        }
        s
    };
    let tz = chrono_tz::Tz::UTC;
    let t0 = Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap();
    let mut mix = ShapeMix::default();
    let mut accepted = 0;
    for k in 0..8 {
        let report = [count(hostile(k), WorkloadKind::Job, 1, 0)];
        if check_report(&report).is_ok() {
            accepted += 1;
            mix.observe(&report, t0 + Duration::minutes(5 * k as i64), tz);
        }
    }
    let size = serde_json::to_string(&mix).unwrap().len();
    assert!(size <= 48 << 10, "{accepted} reports taken in, the mix is {} KB of JSON", size >> 10);
}

#[test]
fn a_shape_times_k_is_a_multiple_of_it_and_nothing_else_is() {
    let gpu = {
        let mut s = PodShape::new(3000, 12 << 30);
        s.extended.insert("nvidia.com/gpu".into(), 1);
        s
    };
    for base in [PodShape::new(250, 512 << 20), PodShape::new(0, 1 << 30), gpu] {
        for k in 1..=8 {
            assert_eq!(base.times(k).multiple_of(&base), Some(k), "{base} × {k}");
        }
    }
    let base = PodShape::new(250, 512 << 20);
    assert_eq!(PodShape::new(1000, 1 << 30).multiple_of(&base), None, "CPU 4×, memory 2×");
    assert_eq!(PodShape::new(100, 512 << 20).multiple_of(&base), None, "smaller");
    assert_eq!(PodShape::new(250, 512 << 20).multiple_of(&PodShape::default()), None, "of nothing");
}

/// The mixed pool's `min` of 2 units (2 CPU / 4Gi) with Jobs of 8 CPU at 9 % of the
/// room: each shape rounded up held one 8-CPU pause pod beside the web pods, 9 CPU for
/// 2, half a node all day. The room is covered, by less than one pod over.
#[test]
fn a_small_room_split_between_shapes_holds_no_hole_it_does_not_need() {
    let web = PodShape::new(500, GI);
    let job = PodShape::new(8000, 16 * GI);
    let s = shares(&[(web.clone(), WorkloadKind::LongRunning, 91.0), (job.clone(), WorkloadKind::Job, 9.0)]).unwrap();
    assert_eq!(s.shapes.len(), 2, "{s:?}");
    let room = Room { cpu_millis: 2000.0, memory_bytes: 4.0 * GI as f64, units: 2.0 };
    let slots = place(room, &s, &[], &no_quota());
    let pods = |shape: &PodShape| slots.iter().filter(|x| x.shape == *shape).map(|x| x.pods).sum::<u32>();
    assert_eq!((pods(&web), pods(&job)), (4, 0), "{slots:?}");
    // 48 CPU: the Jobs' part is 3.66 of their pods: 3 holes, the rest in web pods.
    let room = Room { cpu_millis: 48_000.0, memory_bytes: 96.0 * GI as f64, units: 48.0 };
    let slots = place(room, &s, &[], &no_quota());
    let held: u64 = slots.iter().map(|x| u64::from(x.pods) * x.shape.cpu_millis).sum();
    let jobs = slots.iter().filter(|x| x.shape == job).map(|x| x.pods).sum::<u32>();
    assert!(jobs == 3 && (48_000..48_000 + 500).contains(&held), "{slots:?}");
}

/// Shares that move a little between reports move no pause pod: the pod left over
/// stays with the shape that runs it until another shape's part is clearly nearer one.
#[test]
fn the_pod_left_over_stays_with_the_shape_running_it() {
    let small = PodShape::new(500, GI);
    let large = PodShape::new(1000, 2 * GI);
    let room = Room { cpu_millis: 2000.0, memory_bytes: 4.0 * GI as f64, units: 2.0 };
    let split = |small_pods: f64, running: &[SlotState]| {
        let s = shares(&[
            (small.clone(), WorkloadKind::LongRunning, small_pods),
            (large.clone(), WorkloadKind::LongRunning, 100.0 - small_pods),
        ])
        .unwrap();
        let slots = place(room, &s, running, &no_quota());
        let pods = |shape: &PodShape| slots.iter().filter(|x| x.shape == *shape).map(|x| x.pods).sum::<u32>();
        (pods(&small), pods(&large))
    };
    let first = split(70.0, &[]);
    let held = |(a, b): (u32, u32)| u64::from(a) * 500 + u64::from(b) * 1000;
    assert!((2000..2500).contains(&held(first)), "{first:?}");
    let running = [
        SlotState { slot: 0, shape: small.clone(), replicas: Some(first.0) },
        SlotState { slot: 1, shape: large.clone(), replicas: Some(first.1) },
    ];
    for small_pods in [66.0, 68.0, 72.0, 74.0] {
        assert_eq!(split(small_pods, &running), first, "{small_pods} % of small pods");
    }
    // A split that has really moved moves the pod.
    let moved = split(95.0, &running);
    assert_ne!(moved, first);
    assert!((2000..2500).contains(&held(moved)), "{moved:?}");
}

/// Shares as [`shares`] would give them, written out: the split `place` is given.
fn split(parts: &[(&PodShape, f64)]) -> Shares {
    let shapes = parts.iter().map(|(s, share)| ((*s).clone(), *share, String::new())).collect();
    Shares { shapes, left_out: Vec::new() }
}

/// The running Deployments `place` sees the next run: what it placed, one slot each.
fn ran(slots: &[Slots]) -> Vec<SlotState> {
    slots
        .iter()
        .enumerate()
        .map(|(slot, s)| SlotState { slot, shape: s.shape.clone(), replicas: Some(s.pods) })
        .collect()
}

/// A shape that runs no pod takes one only from three quarters of a pod: another
/// Deployment running a multiple of its shape (1 CPU / 2Gi pods are two 500m / 1Gi
/// ones) is not its pods. Counted as such, the 500m shape rounds up from a quarter
/// whatever it runs, so a part that moves between 0.2 and 0.3 pod creates and deletes
/// its pause pod at every report.
#[test]
fn a_deployment_of_a_multiple_shape_is_not_the_pod_a_shape_runs() {
    let small = PodShape::new(500, GI);
    let large = PodShape::new(1000, 2 * GI);
    let room = Room { cpu_millis: 4000.0, memory_bytes: 8.0 * GI as f64, units: 4.0 };
    let mut running: Vec<SlotState> = Vec::new();
    let mut small_pods = Vec::new();
    // The small shape's part: 8 pods of the room times 2.5 % or 3.75 %, 0.2 or 0.3 pod.
    for share in [0.025, 0.0375, 0.025, 0.0375, 0.025, 0.0375] {
        let slots = place(room, &split(&[(&large, 1.0 - share), (&small, share)]), &running, &no_quota());
        small_pods.push(slots[1].pods);
        running = ran(&slots);
    }
    assert_eq!(small_pods, [0; 6], "a part under 0.75 pod of a shape running none");
}

/// What is still short of the room goes into pods that hold no device when a shape
/// without one is placed: a GPU pause pod holds a GPU (a GPU node kept for it), and a
/// GPU shape asking little CPU and memory is the "smallest" by them. Web pods of
/// 2 CPU / 8Gi at 80 % of 4 units (1.6 pods) and inference pods of 500m / 1Gi + 1 GPU
/// at 20 % (1.6 pods): the short 0.375 of the room went into 3 more GPU pause pods,
/// 4 GPUs held for a part of 1.6 (rounding each part up held 2).
#[test]
fn the_rest_of_the_room_is_held_in_pods_without_a_device() {
    let web = PodShape::new(2000, 8 * GI);
    let inference = gpu(500, 1, 1);
    let room = Room { cpu_millis: 4000.0, memory_bytes: 8.0 * GI as f64, units: 4.0 };
    let slots = place(room, &split(&[(&web, 0.8), (&inference, 0.2)]), &[], &no_quota());
    assert!(slots[1].pods <= 2, "GPU pause pods for a part of 1.6 pods: {slots:?}");
    let (cpu, memory) = slots.iter().fold((0, 0), |(c, m), s| {
        (c + u64::from(s.pods) * s.shape.cpu_millis, m + u64::from(s.pods) * s.shape.memory_bytes)
    });
    assert!(cpu >= 4000 && memory >= 8 * GI, "{slots:?}");
}

/// A shape that asks no memory (pods that request CPU only) holds none: what is still
/// short goes into pods that hold what is short. 1 CPU / 2Gi pods at 75 % of 2 units
/// (1.5 pods, rounded to 1) and 100m pods asking no memory at 25 %: the short quarter
/// went into five more 100m pods, 2 CPU and 2Gi held where the room is 4Gi and the
/// 1-CPU pods' part alone is 3Gi (rounding each part up held 2.5 CPU / 4Gi).
#[test]
fn the_rest_of_the_room_is_held_in_pods_that_hold_what_is_short() {
    let unit = PodShape::new(1000, 2 * GI);
    let cpu_only = PodShape::new(100, 0);
    let room = Room { cpu_millis: 2000.0, memory_bytes: 4.0 * GI as f64, units: 2.0 };
    let slots = place(room, &split(&[(&unit, 0.75), (&cpu_only, 0.25)]), &[], &no_quota());
    let memory: u64 = slots.iter().map(|s| u64::from(s.pods) * s.shape.memory_bytes).sum();
    assert!(memory >= 3 * GI, "the 1-CPU pods' part of the memory: {slots:?}");
}
