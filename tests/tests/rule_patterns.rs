//! Every EventBridge pattern of both templates (infra/sam/template.yaml as
//! aws-sam-translator makes it, and the CDK app's synthesized template), rendered for
//! account 123456789012, against every fixture in events/, judged by moto's own matcher:
//! each rule targets its own SQS queue, each fixture is put on the bus (by moto, in that
//! account), and the queues say which rules matched. A typo in a pattern fails here.
//! The config-changed rule takes the config parameter's own Create and Update events,
//! not another parameter's nor a Delete.

use std::collections::{BTreeMap, BTreeSet};

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

/// Which rule should take which fixture, by the fixture's file name.
fn expected(rule_kind: &str, fixture: &str) -> bool {
    let loss =
        ["state-change-stopping", "state-change-stopped", "state-change-shutting-down", "state-change-terminated"];
    match rule_kind {
        "spot-interruption" => fixture.starts_with("spot-interruption-"),
        "rebalance" => fixture.starts_with("rebalance-"),
        "state-change" => loss.iter().any(|l| fixture.starts_with(l)),
        // Launch outcomes, failed and successful.
        "launch-unsuccessful" => fixture.starts_with("launch-"),
        "lifecycle" => fixture.starts_with("lifecycle-"),
        "health" => fixture.starts_with("health-"),
        "forwarder" => fixture.starts_with("forwarder-"),
        // Variants made by the test (another parameter, a Delete) take nothing.
        "config-changed" => fixture == "ssm-parameter-change.json",
        other => panic!("a rule of unknown kind: {other}"),
    }
}

/// The rule's kind from its pattern (the template's names differ between SAM and CDK).
fn kind_of(pattern: &Value) -> &'static str {
    let detail_type = pattern["detail-type"][0].as_str().unwrap_or_default();
    match detail_type {
        "EC2 Spot Instance Interruption Warning" => "spot-interruption",
        "EC2 Instance Rebalance Recommendation" => "rebalance",
        "EC2 Instance State-change Notification" => "state-change",
        "EC2 Instance Launch Unsuccessful" => "launch-unsuccessful",
        "EC2 Instance-terminate Lifecycle Action" => "lifecycle",
        "AWS Health Event" => "health",
        "Pool Demand Changed" => "forwarder",
        "Parameter Store Change" => "config-changed",
        other => panic!("a rule for an unexpected detail-type: {other}"),
    }
}

async fn check(template_name: &str, template: Template) {
    let Some(moto) = Moto::start() else { return };
    let sdk = moto.sdk().await;
    let events = aws_sdk_eventbridge::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    events.create_event_bus().name("ballast-forwarder").send().await.unwrap();
    let rules = rules(&template);
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
        queues.insert(rule.clone(), (url, kind_of(pattern), bus));
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
            let should = expected(kind, name);
            if should != got.contains(name) {
                wrong.push(format!(
                    "{template_name} rule {rule} ({kind}, bus {bus}) {} {name}",
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
    assert!(!expected("state-change", "state-change-running.json"));
    assert!(expected("state-change", "state-change-terminated.json"));
}
