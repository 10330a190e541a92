use super::*;
use chrono::{DateTime, Utc};
use proptest::prelude::*;
use std::path::PathBuf;

fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../events")
}

fn origin() -> Origin {
    Origin { account: Some("123456789012".into()), region: "eu-west-1".into() }
}

fn fixture(name: &str) -> Result<Event, EventError> {
    let bytes = std::fs::read(events_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    parse_event(&bytes, Some(&origin()))
}

fn ok(name: &str) -> Signal {
    fixture(name).unwrap_or_else(|e| panic!("{name} must parse: {e}")).signal
}

const SPOT: &str = "i-0a1b2c3d4e5f60001";

#[test]
fn spot_interruptions() {
    for (file, action) in [
        ("spot-interruption-terminate.json", InstanceAction::Terminate),
        ("spot-interruption-stop.json", InstanceAction::Stop),
        ("spot-interruption-hibernate.json", InstanceAction::Hibernate),
    ] {
        assert_eq!(ok(file), Signal::SpotInterruption { instance_id: SPOT.into(), action }, "{file}");
    }
    assert_eq!(ok("rebalance-recommendation.json"), Signal::RebalanceRecommendation { instance_id: SPOT.into() });
}

#[test]
fn state_changes() {
    for (file, state, loss) in [
        ("state-change-pending.json", InstanceState::Pending, false),
        ("state-change-running.json", InstanceState::Running, false),
        ("state-change-stopping.json", InstanceState::Stopping, true),
        ("state-change-stopped.json", InstanceState::Stopped, true),
        ("state-change-shutting-down.json", InstanceState::ShuttingDown, true),
        ("state-change-terminated.json", InstanceState::Terminated, true),
    ] {
        assert_eq!(ok(file), Signal::InstanceStateChange { instance_id: SPOT.into(), state }, "{file}");
        assert_eq!(state.is_loss(), loss);
    }
}

#[test]
fn launch_failures_are_classified() {
    use CapacityError::*;
    for (file, expected) in [
        (
            "launch-unsuccessful-insufficient-instance-capacity.json",
            LaunchError::Capacity(InsufficientInstanceCapacity),
        ),
        ("launch-unsuccessful-no-spot-capacity.json", LaunchError::Capacity(NoSpotCapacity)),
        ("launch-unsuccessful-capacity-not-available.json", LaunchError::Capacity(CapacityNotAvailable)),
        (
            "launch-unsuccessful-max-spot-instance-count-exceeded.json",
            LaunchError::Capacity(MaxSpotInstanceCountExceeded),
        ),
        ("launch-unsuccessful-spot-max-price-too-low.json", LaunchError::Capacity(SpotMaxPriceTooLow)),
        ("launch-unsuccessful-unfulfillable-capacity.json", LaunchError::Capacity(UnfulfillableCapacity)),
        ("launch-unsuccessful-vcpu-limit-exceeded.json", LaunchError::Other(Some("VcpuLimitExceeded".into()))),
        (
            "launch-unsuccessful-invalid-launch-template.json",
            LaunchError::Other(Some("InvalidLaunchTemplateId.NotFound".into())),
        ),
        ("launch-unsuccessful-iam-unauthorized.json", LaunchError::Other(Some("UnauthorizedOperation".into()))),
    ] {
        let Signal::LaunchUnsuccessful(failure) = ok(file) else { panic!("{file}: not a launch failure") };
        assert_eq!(failure.error, expected, "{file}");
        assert_eq!(failure.asg, "eks-general-spot-m6");
        assert_eq!(failure.availability_zone.as_deref(), Some("eu-west-1b"));
        assert!(failure.at.is_some());
    }
}

#[test]
fn lifecycle_health_schedule_and_forwarder() {
    let Signal::TerminateLifecycleAction(a) = ok("lifecycle-terminate.json") else { panic!() };
    assert_eq!(
        (a.asg.as_str(), a.hook.as_str(), a.instance_id.as_str()),
        ("eks-general-on-demand", "ballast-drain", "i-0f9e8d7c6b5a40001")
    );

    let Signal::ScheduledChange { instance_ids, start_time, .. } = ok("health-scheduled-change.json") else { panic!() };
    assert_eq!(instance_ids, vec!["i-0f9e8d7c6b5a40001".to_string()]);
    assert_eq!(start_time.unwrap().to_rfc3339(), "2026-11-25T09:00:00+00:00", "RFC 2822 time of AWS Health");

    assert_eq!(ok("scheduled-reconcile.json"), Signal::Reconcile);
    assert_eq!(ok("scheduler-reconcile.json"), Signal::Reconcile);
    for file in ["headroom-override.json", "scheduler-headroom-override.json"] {
        assert_eq!(
            ok(file),
            Signal::HeadroomOverride { pool: "general".into(), percent: 40, duration: "2h".parse().unwrap() },
            "{file}"
        );
    }
    let Signal::PoolDemand(d) = ok("forwarder-pool-demand-changed.json") else { panic!() };
    assert_eq!((d.cpu_millis, d.pods, d.nodes), (182_500, 311, 26));
    let Signal::PodsUnschedulable(u) = ok("forwarder-pods-unschedulable.json") else { panic!() };
    assert_eq!(u.count, 7);
    let Signal::NodeLifecycle(n) = ok("forwarder-node-lifecycle.json") else { panic!() };
    assert_eq!((n.capacity_type, n.condition), (CapacityType::Spot, NodeCondition::NotReady));
    let Signal::PoolWaits(w) = ok("forwarder-pool-waits-measured.json") else { panic!() };
    assert_eq!((w.pool.as_str(), w.pods, w.p95_seconds, w.max_seconds), ("general", 42, 7.8, 61.2));
    // Bounds are the forwarder's; a target between two counts from the lower one.
    assert_eq!([w.pods_over(10.0), w.pods_over(12.0), w.pods_over(60.0), w.pods_over(0.1)], [2, 2, 1, 42].map(Some));
    assert_eq!(w.over_with_room, 1, "one of the two over waited beside a pause pod its size");
}

#[test]
fn a_pool_waits_event_from_an_older_forwarder_has_no_count_over_a_target() {
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(events_dir().join("forwarder-pool-waits-measured.json")).unwrap())
            .unwrap();
    v["detail"].as_object_mut().unwrap().remove("buckets");
    v["detail"].as_object_mut().unwrap().remove("over_with_room");
    let Signal::PoolWaits(w) = parse_event(&serde_json::to_vec(&v).unwrap(), None).unwrap().signal else { panic!() };
    assert_eq!(w.pods_over(10.0), None);
    assert_eq!(w.over_with_room, 0, "none counted with room");
}

#[test]
fn capacity_errors_in_aws_plain_wording_are_capacity_and_quotas_are_not() {
    let capacity = |file: &str| match ok(file) {
        Signal::LaunchUnsuccessful(f) => f.error,
        other => panic!("{file}: {other:?}"),
    };
    assert_eq!(
        capacity("launch-unsuccessful-plain-insufficient-capacity.json"),
        LaunchError::Capacity(CapacityError::InsufficientInstanceCapacity)
    );
    assert_eq!(
        capacity("launch-unsuccessful-plain-no-spot-capacity.json"),
        LaunchError::Capacity(CapacityError::NoSpotCapacity)
    );
    assert_eq!(
        capacity("launch-unsuccessful-plain-max-spot-instance-count.json"),
        LaunchError::Capacity(CapacityError::MaxSpotInstanceCountExceeded)
    );
    assert_eq!(
        capacity("launch-unsuccessful-plain-spot-price-too-low.json"),
        LaunchError::Capacity(CapacityError::SpotMaxPriceTooLow)
    );
    assert_eq!(
        capacity("launch-unsuccessful-plain-placement-group-capacity.json"),
        LaunchError::Capacity(CapacityError::InsufficientInstanceCapacity)
    );
    // "capacity" in a quota message is not a capacity error.
    assert!(!capacity("launch-unsuccessful-plain-vcpu-limit.json").is_capacity());
    assert!(!LaunchError::classify(
        "Your quota allows for 0 more running instance(s). You requested at least 1. Launching EC2 instance failed.",
        ""
    )
    .is_capacity());
}

#[test]
fn health_is_parsed_leniently_and_what_is_not_ours_is_ignored_not_refused() {
    // AWS's published sample: a weekday that does not match the date.
    match ok("health-scheduled-change-aws-sample.json") {
        Signal::ScheduledChange { start_time, instance_ids, .. } => {
            assert_eq!(start_time.map(|t| t.to_rfc3339()), Some("2016-06-05T15:10:09+00:00".into()));
            assert_eq!(instance_ids, vec!["i-0f9e8d7c6b5a40001".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    for (file, says) in
        [("health-scheduled-change-closed.json", "closed"), ("health-dedicated-host.json", "names no EC2 instance")]
    {
        match ok(file) {
            Signal::Ignored { why, .. } => assert!(why.contains(says), "{file}: {why}"),
            other => panic!("{file}: {other:?}"),
        }
    }
    // The category is read before the fields: an issue event with no entities is ignored.
    let issue = serde_json::json!({
        "version": "0", "id": "h-issue", "detail-type": "AWS Health Event", "source": "aws.health",
        "account": "123456789012", "time": "2026-11-20T09:00:00Z", "region": "eu-west-1", "resources": [],
        "detail": { "eventTypeCategory": "issue", "service": "EC2" }
    });
    assert!(matches!(parse_event_value(issue, Some(&origin())).unwrap().signal, Signal::Ignored { .. }));
    // An unreadable time is informational: left out, not a reason to refuse.
    let mut odd: Value =
        serde_json::from_slice(&std::fs::read(events_dir().join("health-scheduled-change.json")).unwrap()).unwrap();
    odd["detail"]["startTime"] = "sometime next week".into();
    assert!(matches!(
        parse_event_value(odd, Some(&origin())).unwrap().signal,
        Signal::ScheduledChange { start_time: None, .. }
    ));
}

/// AWS's own "Amazon EC2 Instance Retirement" sample (the Health EventBridge schema page),
/// moved to the fixtures' region: the instance only as an ARN, and no `resources`.
#[test]
fn health_names_its_instance_by_arn_in_any_partition_or_in_resources() {
    match ok("health-instance-retirement-aws-sample.json") {
        Signal::ScheduledChange { instance_ids, event_type_code, start_time, end_time } => {
            assert_eq!(instance_ids, vec!["i-1234567890abcdef0".to_string()]);
            assert_eq!(event_type_code, "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED");
            assert_eq!(start_time.map(|t| t.to_rfc3339()), Some("2026-08-27T13:19:03+00:00".into()));
            assert_eq!(end_time, None);
        }
        other => panic!("{other:?}"),
    }
    let sample: Value = serde_json::from_slice(
        &std::fs::read(events_dir().join("health-instance-retirement-aws-sample.json")).unwrap(),
    )
    .unwrap();
    let with = |entities: Value, resources: Value| {
        let mut v = sample.clone();
        v["detail"]["affectedEntities"] = entities;
        v["resources"] = resources;
        parse_event_value(v, Some(&origin()))
    };
    let ids = |r: Result<Event, EventError>| match r.map(|e| e.signal) {
        Ok(Signal::ScheduledChange { instance_ids, .. }) => instance_ids,
        other => panic!("{other:?}"),
    };
    let entity = |v: &str| serde_json::json!({ "entityValue": v });
    // Other partitions; the same instance twice (entity and resource) is one.
    assert_eq!(
        ids(with(
            serde_json::json!([
                entity("arn:aws-cn:ec2:cn-north-1:123456789012:instance/i-0123456789abcdef0"),
                entity("arn:aws-us-gov:ec2:us-gov-west-1:123456789012:instance/i-0a1b2c3d"),
                entity("vol-0123456789abcdef0"),
                entity("arn:aws:ec2:eu-west-1:123456789012:volume/vol-0123456789abcdef0"),
            ]),
            serde_json::json!(["arn:aws-cn:ec2:cn-north-1:123456789012:instance/i-0123456789abcdef0"])
        )),
        ["i-0123456789abcdef0", "i-0a1b2c3d"]
    );
    // Named in `resources` only (by id or ARN), the entities listing hosts.
    assert_eq!(
        ids(with(
            serde_json::json!([entity("h-0123456789abcdef0")]),
            serde_json::json!([
                "i-0f9e8d7c6b5a40001",
                "arn:aws:ec2:eu-west-1:123456789012:instance/i-0f9e8d7c6b5a40002"
            ])
        )),
        ["i-0f9e8d7c6b5a40001", "i-0f9e8d7c6b5a40002"]
    );
    // An instance ARN whose id is not one is refused, naming where it was.
    let err =
        with(serde_json::json!([entity("arn:aws:ec2:eu-west-1:123456789012:instance/web-1")]), serde_json::json!([]))
            .unwrap_err();
    assert_eq!(err.field_name(), Some("detail.affectedEntities[0].entityValue"), "{err}");
    // Not an EC2 instance ARN: another service's, or not an ARN at all.
    for odd in ["arn:aws:rds:eu-west-1:123456789012:db:instance/i-0123456789abcdef0", "arn:lambda-1-101002929", "arn:"]
    {
        match with(serde_json::json!([entity(odd)]), serde_json::json!([odd])).unwrap().signal {
            Signal::Ignored { warning, .. } => assert!(warning, "{odd}"),
            other => panic!("{odd}: {other:?}"),
        }
    }
}

#[test]
fn an_ec2_change_to_come_that_names_no_instance_is_a_warning_and_the_rest_routine() {
    match ok("health-dedicated-host.json") {
        Signal::Ignored { why, warning } => assert!(warning && why.contains("names no EC2 instance"), "{why}"),
        other => panic!("{other:?}"),
    }
    match ok("health-scheduled-change-closed.json") {
        Signal::Ignored { warning, .. } => assert!(!warning),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_fixture_parses_and_routes() {
    // The config's own change event concerns no pool: the functions read the config again.
    let change = parse_event(&std::fs::read(events_dir().join("ssm-parameter-change.json")).unwrap(), Some(&origin()));
    assert_eq!(
        change.unwrap().signal,
        Signal::ConfigChanged { parameter: "/ballast/prod-eks/config".into(), operation: "Update".into() }
    );
    let mut count = 0;
    for entry in std::fs::read_dir(events_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let event = parse_event(&std::fs::read(&path).unwrap(), Some(&origin()))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let routable = !event.signal.instance_ids().is_empty()
                || event.signal.named_pool().is_some()
                || event.signal.named_asg().is_some()
                || event.signal == Signal::Reconcile
                || matches!(event.signal, Signal::Ignored { .. } | Signal::ConfigChanged { .. });
            assert!(routable, "{}: a signal must name an instance, an ASG or a pool", path.display());
            count += 1;
        }
    }
    assert!(count >= 28, "expected every kind and variant, found {count}");
}

/// AWS's documented sample of a successful launch: the instance, its ASG and when the
/// launch started (not when the event was sent, 34 s later).
#[test]
fn a_successful_launch_is_dated_by_its_start() {
    let Signal::LaunchSuccessful { asg, instance_id, started } = ok("launch-successful.json") else {
        panic!("not a successful launch")
    };
    assert_eq!((asg.as_str(), instance_id.as_str()), ("sampleLuanchSucASG", "i-b188560f"));
    assert_eq!(started, "2015-11-11T21:31:13.671Z".parse::<DateTime<Utc>>().unwrap());
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(events_dir().join("launch-successful.json")).unwrap()).unwrap();
    v["detail"]["StatusCode"] = "Failed".into();
    let err = parse_event(&serde_json::to_vec(&v).unwrap(), None).unwrap_err();
    assert_eq!(err.field_name(), Some("detail.StatusCode"), "{err}");
}

#[test]
fn auto_scalings_test_of_a_new_hook_is_ignored_in_either_field() {
    match ok("lifecycle-test-notification.json") {
        Signal::Ignored { why, warning } => {
            assert!(!warning && why.contains("autoscaling:TEST_NOTIFICATION for ASG eks-general-on-demand"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(events_dir().join("lifecycle-terminate.json")).unwrap()).unwrap();
    v["detail"]["LifecycleTransition"] = "autoscaling:TEST_NOTIFICATION".into();
    v["detail"].as_object_mut().unwrap().remove("LifecycleActionToken");
    assert!(matches!(parse_event_value(v, Some(&origin())).unwrap().signal, Signal::Ignored { warning: false, .. }));
}

#[test]
fn an_instance_id_has_8_or_17_hex_digits_as_the_error_says() {
    let with = |id: &str| {
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(events_dir().join("state-change-running.json")).unwrap()).unwrap();
        v["detail"]["instance-id"] = id.into();
        parse_event_value(v, Some(&origin()))
    };
    for good in ["i-0a1b2c3d", "i-0a1b2c3d4e5f60001", "i-0A1B2C3D"] {
        assert!(with(good).is_ok(), "{good}");
    }
    for n in (0..8).chain(9..17).chain(18..20) {
        let id = format!("i-{}", "a".repeat(n));
        let err = with(&id).unwrap_err().to_string();
        assert!(err.ends_with(&format!("`{id}` is not an EC2 instance id (i- and 8 or 17 hex digits)")), "{err}");
    }
}

#[test]
fn an_sqs_batch_or_record_gives_its_bodies_and_anything_else_is_read_as_an_event() {
    let read = |name: &str| std::fs::read(events_dir().join(name)).unwrap();
    let bodies = sqs_bodies(&read("sqs/batch.json")).unwrap().unwrap();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0].message_id, "059f36b4-87a3-44ab-83d2-661975830a7d");
    assert_eq!(
        parse_event(bodies[0].body.as_bytes(), Some(&origin())).unwrap().signal,
        ok("spot-interruption-terminate.json")
    );
    let record = sqs_bodies(&read("sqs/record.json")).unwrap().unwrap();
    assert_eq!(record[0].message_id, "c80e8021-a70a-42c7-a470-796e1186f753");
    // Envelopes, Scheduler input and other services' records are not SQS deliveries.
    for name in ["spot-interruption-terminate.json", "scheduler-reconcile.json", "invalid/truncated.json"] {
        assert!(sqs_bodies(&read(name)).is_none(), "{name}");
    }
    let s3 = br#"{"Records":[{"eventSource":"aws:s3","s3":{}}]}"#;
    assert!(sqs_bodies(s3).is_none());
    assert_eq!(sqs_bodies(br#"{"Records":[]}"#).unwrap().unwrap(), vec![]);
    // A record without its text body is named.
    let no_body = br#"{"Records":[{"messageId":"m1","body":"{}","eventSource":"aws:sqs"},{"messageId":"m2","eventSource":"aws:sqs","body":{"id":1}}]}"#;
    let err = sqs_bodies(no_body).unwrap().unwrap_err();
    assert_eq!(err.field_name(), Some("Records[1].body"), "{err}");
    let err = sqs_bodies(br#"{"Records":{"a":1}}"#).unwrap().unwrap_err();
    assert_eq!(err.field_name(), Some("Records"), "{err}");
}

#[test]
fn invalid_fixtures_name_the_field() {
    for (file, field, reason) in [
        ("missing-detail.json", Some("detail"), "is required"),
        ("wrong-field-type.json", Some("detail.instance-id"), "expected text (quote it if it looks like a number"),
        ("unknown-instance-action.json", Some("detail.instance-action"), "`explode` is not one of `terminate`"),
        ("unknown-detail-type.json", None, "EC2 Instance Teleport Notice"),
        ("foreign-account.json", Some("account"), "999999999999"),
        ("foreign-region.json", Some("region"), "us-east-1"),
        ("truncated.json", None, "not valid JSON"),
        ("not-an-object.json", Some("(event)"), "expected a JSON object"),
        ("bad-instance-id.json", Some("detail.instance-id"), "`vm-42` is not an EC2 instance id"),
        ("bad-time.json", Some("time"), "input contains invalid characters"),
        ("headroom-override-missing-pool.json", Some("detail.pool"), "is required"),
        (
            "demand-negative-cpu.json",
            Some("detail.cpu_millis"),
            "the number `-5` is out of range: expected a whole number",
        ),
        ("demand-shape-twice.json", Some("detail.shapes"), "4 CPU / 14Gi + 1 nvidia.com/gpu is listed twice"),
        ("lifecycle-launching.json", Some("detail.LifecycleTransition"), "EC2_INSTANCE_LAUNCHING"),
        ("missing-id.json", Some("id"), "is required"),
        ("pool-waits-p95-above-max.json", Some("detail.p95_seconds"), "90 is above max_seconds (61.2)"),
        ("launch-successful-no-start-time.json", Some("detail.StartTime"), "cannot be timed"),
        ("pool-waits-buckets-falling.json", Some("detail.buckets"), "38 pods within 15 s is not between 40 and"),
        ("lifecycle-hook-straight-to-sqs.json", None, "lifecycle hook ballast-drain of ASG eks-general-on-demand"),
        (
            "lifecycle-test-notification-straight-to-sqs.json",
            None,
            "test notification for a new hook on ASG eks-general-on-demand",
        ),
        (
            "pool-waits-buckets-contradict-p95.json",
            Some("detail.buckets"),
            "42 pods within 0.5 s contradicts 42 pods, p95 60 s",
        ),
    ] {
        let err = fixture(&format!("invalid/{file}")).expect_err(file);
        assert_eq!(err.field_name(), field, "{file}: {err}");
        assert!(err.to_string().contains(reason), "{file}: `{err}` should mention `{reason}`");
        // serde's own wording names Rust types: said in words instead.
        for rust in
            ["expected u", "expected i", "expected a string", "invalid type", "invalid value", "unknown variant"]
        {
            assert!(!err.to_string().contains(rust), "{file}: `{err}` says `{rust}`");
        }
    }
    let listed = std::fs::read_dir(events_dir().join("invalid")).unwrap().count();
    assert_eq!(listed, 21, "every invalid fixture has an expectation here");
    // Both say how to route the hook instead.
    for file in ["lifecycle-hook-straight-to-sqs.json", "lifecycle-test-notification-straight-to-sqs.json"] {
        let err = fixture(&format!("invalid/{file}")).unwrap_err().to_string();
        assert!(err.contains("straight to SQS") && err.contains("without a notification target"), "{file}: {err}");
    }
}

#[test]
fn a_pool_waits_window_longer_than_an_hour_is_not_the_forwarders() {
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(events_dir().join("forwarder-pool-waits-measured.json")).unwrap())
            .unwrap();
    v["detail"]["window_start"] = "0001-01-01T00:00:00Z".into();
    let err = parse_event(&serde_json::to_vec(&v).unwrap(), None).unwrap_err();
    assert_eq!(err.field_name(), Some("detail.window_start"), "{err}");
}

#[test]
fn origin_is_optional() {
    let bytes = std::fs::read(events_dir().join("invalid/foreign-account.json")).unwrap();
    assert!(parse_event(&bytes, None).is_ok(), "without an origin the account is not checked");
}

#[test]
fn interruption_resource_must_match_detail() {
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(events_dir().join("spot-interruption-terminate.json")).unwrap()).unwrap();
    v["resources"] = serde_json::json!(["arn:aws:ec2:eu-west-1:123456789012:instance/i-0123456789abcdef0"]);
    let err = parse_event_value(v, Some(&origin())).unwrap_err();
    assert_eq!(err.field_name(), Some("resources"));
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|n| serde_json::Number::from_f64(n).map(Value::Number).unwrap_or(Value::Null)),
        "\\PC{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("aws.ec2"),
            Just("EC2 Spot Instance Interruption Warning"),
            Just("aws.autoscaling"),
            Just("EC2 Instance Launch Unsuccessful"),
            Just("ballast.kubernetes"),
            Just("Pool Demand Changed"),
            Just("i-0a1b2c3d4e5f60001"),
            Just("2026-11-20T09:12:04Z"),
            Just("123456789012"),
            Just("eu-west-1"),
            Just("aws.health"),
            Just("AWS Health Event"),
            Just("headroom"),
            Just("aws.events"),
            Just("Scheduled Event"),
        ]
        .prop_map(|s| Value::String(s.to_string())),
    ];
    let keys = prop_oneof![
        Just("detail-type"),
        Just("source"),
        Just("detail"),
        Just("id"),
        Just("time"),
        Just("account"),
        Just("region"),
        Just("instance-id"),
        Just("instance-action"),
        Just("state"),
        Just("action"),
        Just("pool"),
        Just("percent"),
        Just("for"),
        Just("StatusCode"),
        Just("AutoScalingGroupName"),
        Just("ActivityId"),
        Just("affectedEntities"),
        Just("entityValue"),
        Just("service"),
        Just("eventTypeCategory"),
        Just("cpu_millis"),
        Just("resources"),
    ]
    .prop_map(str::to_string);
    leaf.prop_recursive(4, 48, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_event(&bytes, Some(&origin()));
    }

    #[test]
    fn arbitrary_json_never_panics(value in arb_json()) {
        let _ = parse_event_value(value.clone(), Some(&origin()));
        let _ = parse_event(value.to_string().as_bytes(), None);
    }

    #[test]
    fn mutated_fixtures_never_panic(index in 0usize..30, cut in 0usize..2000, byte in any::<u8>()) {
        let mut files: Vec<_> = std::fs::read_dir(events_dir()).unwrap()
            .filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "json")).collect();
        files.sort();
        let mut bytes = std::fs::read(&files[index % files.len()]).unwrap();
        if !bytes.is_empty() {
            let at = cut % bytes.len();
            bytes[at] = byte;
            let _ = parse_event(&bytes, Some(&origin()));
            bytes.truncate(at);
            let _ = parse_event(&bytes, Some(&origin()));
        }
    }
}

/// Whatever waits a forwarder sums up, its window passes the checks: waits on a bound,
/// a p95 equal to the max, one pod, many (the rank the check uses is the p95's).
#[test]
fn every_window_the_forwarder_sums_up_passes_the_checks() {
    let at = chrono::Utc::now();
    let bounds = crate::event::WAIT_BUCKETS_SECONDS;
    for n in 1..=400usize {
        for waits in [
            (0..n).map(|i| bounds[i % bounds.len()]).collect::<Vec<f64>>(),
            (0..n).map(|i| i as f64 * 0.37).collect(),
            vec![10.0; n],
        ] {
            let mut waits = waits;
            let detail = crate::event::PoolWaitsDetail::summing("p", at, at, &mut waits).unwrap();
            let value = serde_json::json!({
                "version": "0", "id": "1", "detail-type": "Pool Waits Measured", "source": "ballast.kubernetes",
                "account": "123456789012", "time": at.to_rfc3339(), "region": "eu-west-1", "resources": [],
                "detail": detail,
            });
            let parsed = parse_event(&serde_json::to_vec(&value).unwrap(), None);
            assert!(parsed.is_ok(), "{n} pods: {parsed:?}");
        }
    }
}

#[test]
fn a_newer_forwarders_events_are_read_by_this_function() {
    // The forwarder (an image in the cluster) and the functions (a stack) are upgraded
    // apart, either first: fields and node conditions this version does not know are
    // passed over, not a reason to drop the event.
    let newer = |file: &str, change: &dyn Fn(&mut Value)| {
        let mut v: Value = serde_json::from_slice(&std::fs::read(events_dir().join(file)).unwrap()).unwrap();
        change(&mut v["detail"]);
        parse_event(&serde_json::to_vec(&v).unwrap(), None).unwrap_or_else(|e| panic!("{file}: {e}")).signal
    };
    let added = |d: &mut Value| d["forwarder_version"] = "9.9.0".into();
    for file in [
        "forwarder-pool-demand-changed.json",
        "forwarder-pods-unschedulable.json",
        "forwarder-node-lifecycle.json",
        "forwarder-pool-waits-measured.json",
    ] {
        assert_eq!(newer(file, &added), ok(file), "{file}: an added field is passed over");
    }
    let Signal::PoolWaits(w) = newer("forwarder-pool-waits-measured.json", &|d| {
        for bucket in d["buckets"].as_array_mut().unwrap() {
            bucket["exemplar"] = "pod/x".into();
        }
    }) else {
        panic!()
    };
    assert_eq!(w.pods_over(10.0), Some(2), "the buckets still count");
    let Signal::NodeLifecycle(n) = newer("forwarder-node-lifecycle.json", &|d| d["condition"] = "draining".into())
    else {
        panic!()
    };
    assert_eq!(n.condition, NodeCondition::Other("draining".into()));
}
