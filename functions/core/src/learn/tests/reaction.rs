//! Cluster-autoscaler's reaction: pods unschedulable to the launch that answers them.

use super::*;

/// Cluster-autoscaler's reaction: from pods arriving unschedulable to the earliest launch
/// started after them (within two minutes), whatever order the launches are reported in
/// and however often; taken once every such launch has been reported (five minutes on);
/// the median of those taken, so a launch another writer started moves it by no more than
/// one sample; kept across a new target, as the lead times are.
#[test]
fn cluster_autoscalers_reaction_is_timed_to_the_earliest_launch_after_the_pods() {
    let mut h = History {
        allowed_wait_ms: 10_000,
        lead: Lead { lead_secs: vec![120], ..Default::default() },
        ..Default::default()
    };
    assert_eq!(
        (h.reaction(), h.node_wait()),
        (Learned { duration: CA_REACTION, observed: false }, Duration::seconds(130))
    );
    let t0 = monday() + Duration::hours(9);
    // Five arrivals ten minutes apart; each one's launches reported latest first, twice.
    for (k, secs) in [6, 50, 8, 7, 9].into_iter().enumerate() {
        let since = t0 + Duration::minutes(10 * k as i64);
        h.pods_unschedulable(since);
        h.pods_unschedulable(since); // delivered twice
        assert_eq!(h.reaction.arrivals.len(), 1);
        for started in [since + Duration::seconds(secs + 20), since + Duration::seconds(secs)] {
            h.launch_started(&format!("i-{k}-{started}"), started);
            h.launch_started(&format!("i-{k}-{started}"), started);
        }
        h.observe(&empty_pool(), None, since + Duration::minutes(5) - Duration::seconds(1), 14);
        assert_eq!(h.reaction.reaction_secs.len(), k, "not taken before every launch for them can be in");
        h.observe(&empty_pool(), None, since + Duration::minutes(5), 14);
    }
    assert_eq!(h.reaction.reaction_secs, [6, 50, 8, 7, 9]);
    assert_eq!(
        (h.reaction(), h.node_wait()),
        (Learned { duration: Duration::seconds(8), observed: true }, Duration::seconds(128))
    );
    // A late copy of an arrival already timed, and a launch that started before the
    // pods: nothing.
    let t1 = t0 + Duration::hours(2);
    h.pods_unschedulable(t0);
    assert!(h.reaction.arrivals.is_empty());
    h.pods_unschedulable(t1);
    h.launch_started("i-before", t1 - Duration::seconds(1));
    // Nor one 121 s after them.
    h.launch_started("i-late", t1 + Duration::seconds(121));
    h.observe(&empty_pool(), None, t1 + Duration::minutes(5), 14);
    assert_eq!(h.reaction.reaction_secs.len(), 5);
    assert!(h.reaction.arrivals.is_empty());
    // Two arrivals before one launch: cluster-autoscaler's scan answered both.
    let t2 = t1 + Duration::hours(1);
    h.pods_unschedulable(t2);
    h.pods_unschedulable(t2 + Duration::seconds(30));
    h.launch_started("i-a", t2 + Duration::seconds(40));
    h.observe(&empty_pool(), None, t2 + Duration::minutes(6), 14);
    assert_eq!(h.reaction.reaction_secs[5..], [40, 10]);
    // A slow cluster-autoscaler (a large cluster): 90 s is its reaction.
    let t3 = t2 + Duration::hours(1);
    h.pods_unschedulable(t3);
    h.launch_started("i-slow", t3 + Duration::seconds(90));
    // A launch reported before the pods' report (retried, or in a later batch): still theirs.
    let t4 = t3 + Duration::hours(1);
    h.launch_started("i-early-news", t4 + Duration::seconds(20));
    h.pods_unschedulable(t4);
    h.observe(&empty_pool(), None, t4 + Duration::minutes(5), 14);
    assert_eq!(h.reaction.reaction_secs[7..], [90, 20]);
    h.retarget(30_000, "");
    assert_eq!((h.reaction.reaction_secs.len(), h.allowed_wait_ms), (9, 30_000));
    // A record from before reactions were kept reads as none seen.
    let old: History = serde_json::from_str(r#"{"lead_secs":[120]}"#).unwrap();
    assert_eq!(old.reaction(), Learned { duration: CA_REACTION, observed: false });
}

/// Arrivals are bounded: the oldest beyond the bound is taken at once.
#[test]
fn arrivals_of_unschedulable_pods_stay_bounded() {
    let mut h = History::default();
    let t0 = monday();
    for k in 0..(MAX_ARRIVALS as i64 + 12) {
        let since = t0 + Duration::seconds(5 * k);
        h.pods_unschedulable(since);
        h.launch_started(&format!("i-{k}"), since + Duration::seconds(3));
    }
    assert_eq!(h.reaction.arrivals.len(), MAX_ARRIVALS);
    assert_eq!(h.reaction.reaction_secs, [3; 12]);
}
