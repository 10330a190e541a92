//! Lead time: launches followed from their start to a Ready node.

use super::*;

#[test]
fn the_lead_time_is_launch_to_ready_as_observed() {
    let mut h = History::default();
    let t0 = monday();
    // At the first look, i-old is already launching: when it launched is unknown. i-node
    // has a node that is not Ready: a known node (a kubelet restart), not a launch.
    h.observe(&launching_pool(&[("i-old", None), ("i-node", Some(false))]), None, t0, 14);
    let both = [("i-old", None), ("i-node", Some(false)), ("i-new", None)];
    h.observe(&launching_pool(&both), None, t0 + Duration::seconds(30), 14);
    let ready = [("i-old", Some(true)), ("i-node", Some(true)), ("i-new", Some(true))];
    h.observe(&launching_pool(&ready), None, t0 + Duration::seconds(160), 14);
    assert_eq!(h.lead.lead_secs, vec![130], "i-new only");
    assert_eq!(h.lead(), Learned { duration: Duration::seconds(130), observed: true });
    assert!(h.lead.launching.is_empty());
    // A launch that leaves the ASG before Ready is forgotten, not counted.
    h.observe(&launching_pool(&[("i-gone", None)]), None, t0 + Duration::seconds(200), 14);
    h.observe(&empty_pool(), None, t0 + Duration::seconds(260), 14);
    assert!(h.lead.launching.is_empty());
    assert_eq!(h.lead.lead_secs, vec![130]);
    // A launch whose Ready is seen only after a long gap between looks (Ballast stopped)
    // is not timed: it became Ready any time in the gap.
    h.observe(&launching_pool(&[("i-late", None)]), None, t0 + Duration::seconds(300), 14);
    h.observe(&launching_pool(&[("i-late", Some(true))]), None, t0 + Duration::hours(3), 14);
    assert_eq!(h.lead.lead_secs, vec![130]);
    // Until twenty were timed, their median: one odd launch is not the lead time.
    h.lead.lead_secs = vec![100, 110, 900];
    assert_eq!(h.lead().duration, Duration::seconds(110));
    h.lead.lead_secs = vec![150, 150, 150, 150, 2_910];
    assert_eq!(h.lead().duration, Duration::seconds(150), "one slow launch among five");
    h.lead.lead_secs = (0..19).map(|_| 100).chain([300]).collect();
    assert_eq!(h.lead().duration, Duration::seconds(100));
    // From twenty, the slowest tenth is set aside and the 95th percentile of the rest
    // taken: the third slowest. Two slow launches in twenty are outliers; three are
    // the pool's tail.
    h.lead.lead_secs = (0..18).map(|_| 100).chain([300, 300]).collect();
    assert_eq!(h.lead().duration, Duration::seconds(100));
    h.lead.lead_secs = (0..17).map(|_| 100).chain([300, 300, 300]).collect();
    assert_eq!(h.lead().duration, Duration::seconds(300));
}

/// Auto Scaling's scaling activities date a launch as its Launch Successful event would,
/// where that event was lost: i-old, first seen at the first look (its start unknown), is
/// timed from its activity's start; a launch activity of an instance whose node is known
/// (a kubelet restart) or gone, a failed launch and another activity time nothing.
#[test]
fn scaling_activities_date_a_launch_whose_event_was_lost() {
    let mut h = History::default();
    let t0 = monday();
    let activity = |id: &str, status, description: &str, start| ScalingActivity {
        id: id.into(),
        status,
        description: description.into(),
        status_message: String::new(),
        cause: String::new(),
        start,
        end: None,
    };
    let with_activities = |ready: &[(&str, Option<bool>)]| {
        let mut pool = launching_pool(ready);
        pool.spot[0].activities = vec![
            activity(
                "a1",
                ActivityStatus::InProgress,
                "Launching a new EC2 instance: i-old",
                t0 - Duration::seconds(40),
            ),
            activity(
                "a2",
                ActivityStatus::Successful,
                "Launching a new EC2 instance: i-node",
                t0 - Duration::seconds(50),
            ),
            activity(
                "a3",
                ActivityStatus::Failed,
                "Launching a new EC2 instance: i-bad.  Status Reason: Instance became unhealthy",
                t0 - Duration::seconds(45),
            ),
            activity("a4", ActivityStatus::Successful, "Terminating EC2 instance: i-new", t0 - Duration::seconds(30)),
        ];
        pool
    };
    h.observe(&with_activities(&[("i-old", None), ("i-node", Some(false)), ("i-bad", None)]), None, t0, 14);
    assert_eq!(h.lead.launching["i-old"], Launch { seen: t0 - Duration::seconds(40), timed: true });
    assert!(!h.lead.launching.contains_key("i-node"));
    assert!(!h.lead.launching["i-bad"].timed, "a failed launch's activity dates nothing");
    let ready = [("i-old", Some(true)), ("i-node", Some(true)), ("i-bad", Some(true))];
    h.observe(&with_activities(&ready), None, t0 + Duration::seconds(60), 14);
    assert_eq!(h.lead.lead_secs, vec![100], "i-old, 40 s before the first look to Ready a minute after");
}

#[test]
fn auto_scalings_launch_descriptions_name_the_instance() {
    let said = |description: &str| {
        ScalingActivity {
            id: "a".into(),
            status: ActivityStatus::Successful,
            description: description.into(),
            status_message: String::new(),
            cause: String::new(),
            start: monday(),
            end: None,
        }
        .launched_instance()
        .map(str::to_string)
    };
    // As AWS writes them (DescribeScalingActivities, the docs' examples).
    assert_eq!(said("Launching a new EC2 instance: i-0598c7d356eba48d7").as_deref(), Some("i-0598c7d356eba48d7"));
    assert_eq!(
        said("Launching a new EC2 instance: i-1234abcd1234abcd1.  Status Reason: Instance became unhealthy while waiting for instance to be in InService state.").as_deref(),
        Some("i-1234abcd1234abcd1")
    );
    assert_eq!(
        said("Launching a new EC2 instance: i-075fa0ad6a018cdfc Duration: 243s").as_deref(),
        Some("i-075fa0ad6a018cdfc")
    );
    for other in [
        "Launching a new EC2 instance.  Status Reason: Could not launch Spot Instances. UnfulfillableCapacity",
        "Launching a new EC2 instance into warm pool: i-0598c7d356eba48d7",
        "Terminating EC2 instance: i-0598c7d356eba48d7",
        "Launching a new EC2 instance: ",
        "",
    ] {
        assert_eq!(said(other), None, "{other:?}");
    }
}
