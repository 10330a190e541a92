//! Every EventBridge pattern of both templates (infra/sam/template.yaml as
//! aws-sam-translator makes it, and the CDK app's synthesized template), rendered for
//! account 123456789012, against every fixture in events/, judged by moto's own matcher:
//! each rule targets its own SQS queue, each fixture is put on the bus (by moto, in that
//! account), and the queues say which rules matched. A typo in a pattern fails here.
//! The config-changed rule takes the config parameter's own Create and Update events,
//! not another parameter's nor a Delete.

use std::collections::{BTreeMap, BTreeSet};

use ballast_core::event::EventKind;
use ballast_tests::moto::Moto;
use ballast_tests::repo_root;
use ballast_tests::templates::{rendered, sam_parameters, sam_translated, Template, Variant};
use serde_json::{json, Value};

/// (rule, on the forwarder's bus, pattern) from a rendered template.
fn rules(template: &Template) -> Vec<(String, bool, Value)> {
    let mut found: Vec<(String, bool, Value)> = template
        .of_kind("AWS::Events::Rule")
        .map(|(id, r)| (id.clone(), !r.properties["EventBusName"].is_null(), r.properties["EventPattern"].clone()))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Which rule should take which fixture, by the fixture's file name; a rule is known by
/// the first kind its pattern names.
fn expected(rule_kind: EventKind, fixture: &str) -> bool {
    let loss =
        ["state-change-stopping", "state-change-stopped", "state-change-shutting-down", "state-change-terminated"];
    match rule_kind {
        EventKind::SpotInterruptionWarning => fixture.starts_with("spot-interruption-"),
        EventKind::RebalanceRecommendation => fixture.starts_with("rebalance-"),
        EventKind::InstanceStateChange => loss.iter().any(|l| fixture.starts_with(l)),
        // Launch outcomes, failed and successful.
        EventKind::LaunchUnsuccessful => fixture.starts_with("launch-"),
        // Auto Scaling's test of a new hook is no terminating action: the rule leaves it out
        // (the function ignores it if it comes another way).
        EventKind::TerminateLifecycleAction => {
            fixture.starts_with("lifecycle-") && !fixture.starts_with("lifecycle-test-notification")
        }
        EventKind::HealthEvent => fixture.starts_with("health-"),
        EventKind::PoolDemandChanged => fixture.starts_with("forwarder-"),
        // Variants made by the test (another parameter, a Delete) take nothing.
        EventKind::ParameterStoreChange => fixture == "ssm-parameter-change.json",
        other => panic!("a rule led by a kind no rule should lead: {other:?}"),
    }
}

/// Every (source, detail-type) pair a pattern names, each as its kind; a pair that is no
/// kind Ballast parses fails here, naming it.
fn kinds_of(rule: &str, pattern: &Value) -> Vec<EventKind> {
    let list = |key: &str| -> Vec<String> {
        let values = pattern[key].as_array().unwrap_or_else(|| panic!("rule {rule}: no `{key}` list in its pattern"));
        values.iter().map(|v| v.as_str().expect("a string").to_string()).collect()
    };
    let mut kinds = Vec::new();
    for detail_type in list("detail-type") {
        for source in list("source") {
            match EventKind::of(&source, &detail_type) {
                Some(kind) => kinds.push(kind),
                None => panic!("rule {rule}: `{source}` / `{detail_type}` is no kind of event Ballast parses"),
            }
        }
    }
    kinds
}

/// The rule's kind from its pattern (the template's names differ between SAM and CDK).
fn kind_of(rule: &str, pattern: &Value) -> EventKind {
    kinds_of(rule, pattern)[0]
}

/// Every rule names only kinds Ballast parses, and every kind an EventBridge rule routes
/// is named by some rule.
fn every_kind_has_a_rule(template_name: &str, rules: &[(String, bool, Value)]) {
    let routed: BTreeSet<EventKind> = rules.iter().flat_map(|(rule, _, pattern)| kinds_of(rule, pattern)).collect();
    let missing: Vec<EventKind> =
        EventKind::ALL.into_iter().filter(|k| k.routed_by_rule() && !routed.contains(k)).collect();
    assert!(missing.is_empty(), "{template_name}: no rule routes {missing:?}");
    let unrouted: Vec<EventKind> = routed.iter().copied().filter(|k| !k.routed_by_rule()).collect();
    assert!(unrouted.is_empty(), "{template_name}: rules route {unrouted:?}, which reach Ballast without one");
}

async fn check(template_name: &str, template: Template) {
    let rules = rules(&template);
    every_kind_has_a_rule(template_name, &rules);
    let Some(moto) = Moto::start() else { return };
    let sdk = moto.sdk().await;
    let events = aws_sdk_eventbridge::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    events.create_event_bus().name("ballast-forwarder").send().await.unwrap();
    assert_eq!(rules.len(), 8, "{template_name}: six AWS event rules, the config's and the forwarder's");
    let mut queues = BTreeMap::new();
    for (index, (rule, custom_bus, pattern)) in rules.iter().enumerate() {
        let url =
            sqs.create_queue().queue_name(format!("q{index}")).send().await.unwrap().queue_url().unwrap().to_string();
        let arn = format!("arn:aws:sqs:eu-west-1:123456789012:q{index}");
        let bus = if *custom_bus { "ballast-forwarder" } else { "default" };
        events.put_rule().name(rule).event_bus_name(bus).event_pattern(pattern.to_string()).send().await.unwrap();
        events
            .put_targets()
            .rule(rule)
            .event_bus_name(bus)
            .targets(aws_sdk_eventbridge::types::Target::builder().id("q").arn(arn).build().unwrap())
            .send()
            .await
            .unwrap();
        queues.insert(rule.clone(), (url, kind_of(rule, pattern), bus));
    }
    let mut fixtures = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("events")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            if value.get("detail-type").is_some() {
                fixtures.push((path.file_name().unwrap().to_string_lossy().to_string(), value));
            }
        }
    }
    fixtures.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(fixtures.len() >= 26);
    let change = fixtures.iter().find(|(n, _)| n == "ssm-parameter-change.json").expect("the SSM fixture").1.clone();
    let mut other = change.clone();
    other["detail"]["name"] = json!("/ballast/prod-eks/config-old");
    fixtures.push(("ssm-parameter-change (another parameter)".into(), other));
    let mut deleted = change;
    deleted["detail"]["operation"] = json!("Delete");
    fixtures.push(("ssm-parameter-change (deleted)".into(), deleted));
    let mut matched: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, fixture) in &fixtures {
        for bus in ["default", "ballast-forwarder"] {
            let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .source(fixture["source"].as_str().unwrap())
                .detail_type(fixture["detail-type"].as_str().unwrap())
                .detail(fixture["detail"].to_string())
                .set_resources(
                    fixture["resources"]
                        .as_array()
                        .map(|r| r.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()),
                )
                .event_bus_name(bus)
                .build();
            let out = events.put_events().entries(entry).send().await.unwrap();
            assert_eq!(out.failed_entry_count(), 0, "{name}");
        }
        for (rule, (url, _, _)) in &queues {
            let got = sqs.receive_message().queue_url(url).max_number_of_messages(10).send().await.unwrap();
            for message in got.messages() {
                sqs.delete_message()
                    .queue_url(url)
                    .receipt_handle(message.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
                matched.entry(rule.clone()).or_default().insert(name.clone());
            }
        }
    }
    let mut wrong = Vec::new();
    for (rule, (_, kind, bus)) in &queues {
        let got = matched.get(rule).cloned().unwrap_or_default();
        for (name, _) in &fixtures {
            let should = expected(*kind, name);
            if should != got.contains(name) {
                wrong.push(format!(
                    "{template_name} rule {rule} ({kind:?}, bus {bus}) {} {name}",
                    if should { "missed" } else { "wrongly took" }
                ));
            }
        }
        assert!(!got.is_empty(), "{template_name}: rule {rule} matched nothing");
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn sam_template_patterns_match_exactly_their_events() {
    // Deployed with the fixture's parameter name (the default names it after the cluster).
    let Some(raw) = sam_translated() else { return };
    let mut parameters = sam_parameters(false);
    parameters.insert("ConfigParameterName", Value::from("/ballast/prod-eks/config"));
    check("SAM", Template::render(&raw, &parameters)).await;
}

#[tokio::test]
async fn cdk_template_patterns_match_exactly_their_events() {
    let Some(template) = rendered(Variant::Cdk) else { return };
    check("CDK", template).await;
}

#[test]
fn a_broken_pattern_would_be_caught() {
    // The expectation table itself rejects a state-change rule that takes `running`.
    assert!(!expected(EventKind::InstanceStateChange, "state-change-running.json"));
    assert!(expected(EventKind::InstanceStateChange, "state-change-terminated.json"));
}

#[test]
fn a_rule_for_no_kind_or_a_kind_without_a_rule_would_be_caught() {
    let rule =
        |detail_types: &[&str]| ("r".to_string(), false, json!({ "source": ["aws.ec2"], "detail-type": detail_types }));
    let typo = std::panic::catch_unwind(|| kinds_of("r", &rule(&["EC2 Spot Instance Interruption Warnings"]).2));
    assert!(typo.is_err(), "a misspelt detail-type is no kind");
    let only_spot = vec![rule(&["EC2 Spot Instance Interruption Warning"])];
    assert!(std::panic::catch_unwind(|| every_kind_has_a_rule("T", &only_spot)).is_err(), "kinds left without a rule");
}
