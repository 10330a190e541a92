//! The history as the state record keeps it: within its bounds, never understating
//! what the full records would say, and read and written as records always were.

use proptest::prelude::*;

use super::*;

#[test]
fn windows_at_the_ends_of_time_do_not_panic() {
    let mut h = History::default();
    watch(&mut h, monday(), 10, 14, |_| 10_000);
    h.held(monday(), Rise::default(), false, DecidedBy::Percent, None, false);
    let start = DateTime::<Utc>::MIN_UTC;
    let window = WaitsSeen {
        over: None,
        over_with_room: 0,
        window_start: start,
        window_end: start + Duration::minutes(5),
        pods: 20,
        p95_ms: 60_000,
        max_ms: 60_000,
    };
    assert!(h.measured(window, 10_000));
    let end = DateTime::<Utc>::MAX_UTC;
    let later = WaitsSeen {
        over: None,
        over_with_room: 0,
        window_start: end - Duration::minutes(5),
        window_end: end,
        pods: 20,
        p95_ms: 60_000,
        max_ms: 60_000,
    };
    assert!(h.measured(later, 10_000));
    let _ = h.predict(monday() + Duration::minutes(10), 14);
}

/// Every record at its bound, every slot of 29 days filled with the largest values: the
/// history stays a small part of DynamoDB's 400 KB item even as uncompressed JSON (the
/// proptest below seldom fills a slot of every day).
#[test]
fn a_history_full_at_every_bound_fits_the_state_record() {
    let at = monday();
    let rise = Rise { cpu_millis: u64::from(u32::MAX), memory_bytes: u64::from(u32::MAX) << 20 };
    let waits = WaitsSeen {
        window_start: at,
        window_end: at,
        pods: u32::MAX,
        p95_ms: u64::MAX,
        max_ms: u64::MAX,
        over: Some(u32::MAX),
        over_with_room: u32::MAX,
    };
    let h = History {
        seasonal: Seasonal {
            days: (0..29)
                .map(|d| DayRises {
                    date: at.date_naive() + Duration::days(d),
                    cpu_millis: vec![Some(u32::MAX); SLOTS_PER_DAY],
                    memory_mib: vec![Some(u32::MAX); SLOTS_PER_DAY],
                    pods: u32::MAX,
                    pods_over: u32::MAX,
                    most_pods: u32::MAX,
                    span_secs: u32::MAX,
                    at_once: "X".repeat(SLOTS_PER_DAY),
                    whole: "z".repeat(SLOTS_PER_DAY),
                })
                .collect(),
            recent: vec![
                DemandSample { at, cpu_millis: u64::MAX, memory_bytes: u64::MAX, since: Some(at) };
                MAX_RECENT
            ],
            slot_low: Some(SlotLow {
                date: at.date_naive(),
                slot: u8::MAX,
                cpu_millis: u64::MAX,
                memory_bytes: u64::MAX,
            }),
        },
        reaction: Reaction {
            reaction_secs: vec![u32::MAX; LEAD_SAMPLES],
            arrivals: vec![Arrival { since: at, launch: Some(at) }; MAX_ARRIVALS],
            last_arrival: Some(at),
        },
        lead: Lead {
            lead_secs: vec![u32::MAX; LEAD_SAMPLES],
            launching: (0..MAX_LAUNCHING).map(|i| (format!("i-{i:017x}"), Launch { seen: at, timed: true })).collect(),
            last_look: None,
        },
        held: HeldRoom {
            decisions: vec![
                Held {
                    at,
                    room: rise,
                    at_max: true,
                    by: DecidedBy::Override,
                    decided: Some(rise),
                    after_rise: false
                };
                MAX_HELD
            ],
        },
        correction: Correction {
            missed_waits_secs: vec![u32::MAX; LEAD_SAMPLES],
            last_hour: vec![waits; MAX_HOUR_WINDOWS],
            waits: Some(waits),
            correction_set_at: Some(at),
            raised_without_effect: u8::MAX,
            unanswerable: Some(Unanswerable { date: at.date_naive(), pods: u32::MAX }),
            ..Correction::default()
        },
        time_zone: "America/Argentina/ComodRivadavia".into(),
        hold: Some(Hold { replicas: u32::MAX, at, demand_cpu_millis: u64::MAX, demand_memory_bytes: Some(u64::MAX) }),
        ..History::default()
    };
    let json = serde_json::to_vec(&h).unwrap().len();
    println!("a history full at every bound: {json} bytes of JSON");
    assert!(json < 160 * 1024, "{json} bytes of JSON");
    let back: History = serde_json::from_slice(&serde_json::to_vec(&h).unwrap()).unwrap();
    assert_eq!(back, h);
}

proptest! {
    /// Whatever is observed, for however long, the learner's memory stays within its
    /// bounds (the state record it lives in is read and written each reconcile).
    #[test]
    fn the_history_stays_bounded(
        steps in proptest::collection::vec((1i64..240, 0u64..2_000_000, 0u8..4), 1..400),
        days in 1usize..=28,
    ) {
        let mut h = History::default();
        let mut now = monday();
        let ids: Vec<String> = (0..300).map(|i| format!("i-{i:08x}")).collect();
        for (gap_minutes, cpu, nodes) in steps {
            now += Duration::minutes(gap_minutes * 7);
            let ready = |i: usize| match (i + usize::from(nodes)) % 3 {
                0 => Some(true),
                1 => Some(false),
                _ => None,
            };
            let pool = launching_pool(&ids.iter().enumerate().map(|(i, id)| (id.as_str(), ready(i))).collect::<Vec<_>>());
            h.observe(&pool, Some(demand_at(cpu, now)), now, days);
            let window = WaitsSeen { over: None, over_with_room: 0, window_start: now - Duration::minutes(5), window_end: now, pods: u32::from(nodes) * 5, p95_ms: cpu % 30_000, max_ms: cpu % 90_000 };
            h.measured(window, 10_000);
            prop_assert!(h.seasonal.days.len() <= days + 1);
            prop_assert!(h.seasonal.recent.len() <= MAX_RECENT);
            prop_assert!(h.lead.lead_secs.len() <= LEAD_SAMPLES && h.correction.missed_waits_secs.len() <= LEAD_SAMPLES);
            prop_assert!(h.held.decisions.len() <= MAX_HELD);
            prop_assert!(h.lead.launching.len() <= MAX_LAUNCHING);
            let (lo, hi) = CORRECTION_RANGE;
            prop_assert!((lo..=hi).contains(&h.correction.correction_permille) || h.correction.correction_permille == 0);
            let p = h.predict(now, days);
            prop_assert!(p.seasonal.is_none_or(|(r, _)| r.cpu_millis <= 2_000_000));
            prop_assert!(p.missed.cpu_millis <= 2_000_000 && p.recent.cpu_millis <= 2_000_000);
        }
        let size = serde_json::to_vec(&h).unwrap().len();
        prop_assert!(size < 52 * 1024, "{size} bytes");
    }

    /// Reconciles seconds apart (a scale-up's events), CPU and memory moving apart: the
    /// bounded records never say less than the full ones would. The rise now is at least
    /// the rise over the span from every sample; the room held over a span is at most
    /// the least held, with `max` or an override noted if any decision had them.
    #[test]
    fn the_bounded_records_never_understate_the_full_ones(
        steps in proptest::collection::vec((1i64..40, 0u64..64, 0u64..64, 0u64..8, 0u8..4), 1..600),
    ) {
        let mut h = History { allowed_wait_ms: 10_000, ..Default::default() };
        let span = h.absorb_span();
        let mut now = monday();
        let mut samples: Vec<(DateTime<Utc>, u64, u64)> = Vec::new();
        let mut decisions: Vec<Held> = Vec::new();
        for (gap_seconds, cpu, mem, room, flags) in steps {
            now += Duration::seconds(gap_seconds);
            let (cpu, mem) = (cpu * 1_000, mem << 30);
            h.observe(&empty_pool(), Some(Demand { cpu_millis: cpu, memory_bytes: mem, pods: 1, observed_at: now }), now, 14);
            samples.push((now, cpu, mem));
            let start = now - span;
            let from = samples.iter().rposition(|(at, ..)| *at <= start).unwrap_or(0);
            let low = |f: fn(&(DateTime<Utc>, u64, u64)) -> u64| samples[from..].iter().map(f).min().unwrap();
            let rise = h.predict(now, 14).recent;
            prop_assert!(rise.cpu_millis >= cpu - low(|s| s.1), "cpu {} < {}", rise.cpu_millis, cpu - low(|s| s.1));
            prop_assert!(rise.memory_bytes >= mem - low(|s| s.2));
            prop_assert!(h.seasonal.recent.windows(2).all(|w| w[0].since() <= w[1].since() && w[0].at < w[1].at));
            prop_assert!(h.seasonal.recent.len() <= MAX_RECENT);

            let room = Rise { cpu_millis: room * 1_000, memory_bytes: 0 };
            let by = [DecidedBy::Percent, DecidedBy::Seasonal, DecidedBy::Override, DecidedBy::Seasonal][usize::from(flags)];
            h.held(now, room, flags == 3, by, None, false);
            decisions.push(Held { at: now, room, at_max: flags == 3, by: match flags { 0 => DecidedBy::Percent, 2 => DecidedBy::Override, _ => DecidedBy::Seasonal }, decided: None, after_rise: false });
            prop_assert!(h.held.decisions.len() <= MAX_HELD);
            let from = now - Duration::minutes(30);
            let full_start = decisions.iter().rposition(|d| d.at <= from).unwrap_or(0);
            let full: Vec<&Held> = decisions[full_start..].iter().collect();
            let kept = h.held.over(from, now);
            prop_assert!(kept.least.cpu_millis <= full.iter().map(|d| d.room.cpu_millis).min().unwrap());
            prop_assert!(kept.not_ours || !full.iter().any(|d| d.at_max || d.by == DecidedBy::Override));
            prop_assert!(kept.overridden || !full.iter().any(|d| d.by == DecidedBy::Override));
            prop_assert!(!kept.seasonal || full.iter().all(|d| d.by == DecidedBy::Seasonal));
        }
    }
}

/// A pool record written before the learners were split (by f924d6c, every field of the
/// record and of its history set) reads back, and writes back byte for byte: the state
/// store's records are unchanged by the split.
#[test]
fn a_record_written_before_the_split_reads_and_writes_back_the_same() {
    let written = include_str!("../../../fixtures/pool-record.json");
    let record: crate::record::PoolRecord = serde_json::from_str(written).unwrap();
    let history = record.learned.as_ref().unwrap();
    assert!(!history.seasonal.days.is_empty() && !history.lead.lead_secs.is_empty());
    assert!(!history.reaction.arrivals.is_empty() && !history.held.decisions.is_empty());
    assert!(history.correction.waits.is_some() && history.unmet_reported_at.is_some());
    assert_eq!(serde_json::to_string_pretty(&record).unwrap() + "\n", written);
    let compact: serde_json::Value = serde_json::from_str(written).unwrap();
    assert_eq!(serde_json::to_string(&record).unwrap(), serde_json::to_string(&compact).unwrap());
}

/// A hold written before it kept memory reads back without it, and a rise in memory is
/// then not taken for pause pods preempted (all the demand's memory would be).
#[test]
fn a_hold_written_before_it_kept_memory_sees_no_rise_in_memory() {
    let at = monday() + Duration::hours(10);
    let mut hold: Option<Hold> =
        serde_json::from_str(r#"{"replicas":16,"at":"2026-11-02T10:00:00Z","demand_cpu_millis":10000}"#).unwrap();
    assert_eq!(hold.unwrap().demand_memory_bytes, None);
    let requests = Rise { cpu_millis: 11_000, memory_bytes: 40 << 30 };
    let seen = DemandSeen { requests, rise_came: true, may_wait: false };
    let pod = Rise { cpu_millis: 1_000, memory_bytes: 2 << 30 };
    let (kept, until) = Hold::keep(&mut hold, 1, at + Duration::minutes(1), seen, pod, Duration::minutes(3));
    assert_eq!((kept, until), (15, Some(at + Duration::minutes(3))), "the 1 CPU's pod only");
}
