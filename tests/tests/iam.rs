//! Every AWS call the three functions and the forwarder make, recorded from moto's
//! request log while they run their real code (start-up, an interruption batch with a
//! retry, a malformed message and a lifecycle action, failback and a headroom override on
//! schedule, the forwarder's demand), evaluated with a real IAM policy evaluator
//! (@cloud-copilot/iam-simulate) against each caller's role taken from the SAM template
//! (as aws-sam-translator makes it, with and without a VPC) and the CDK app's synthesized
//! template (VPC mode, the test's names). Every call must be allowed; Auto Scaling changes
//! to another cluster's ASGs or to ASGs outside a pool must be denied; only the stack's
//! rules may feed the queue and only the forwarder the bus; and every action a role is
//! granted is used by a recorded call or listed below with why it is needed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration as StdDuration;

use ballast_core::config::Config;
use ballast_core::event::PoolDemandDetail;
use ballast_core::ports::{ConfigHome, StateStore, Urgency};
use ballast_core::record::PoolRecord;
use ballast_forwarder::bus::{EventBridgeBus, EventBus};
use ballast_forwarder::publisher::Outgoing;
use ballast_lambda::app::{connect_cluster, load_config};
use ballast_lambda::settings::{ClusterAccess, ConfigSource};
use ballast_tests::aws::*;
use ballast_tests::iam::{caller, evaluate, refused, resource_policy, role_of, Call, Case, Inventory, VARIANTS};
use ballast_tests::moto::Moto;
use ballast_tests::templates::{rendered, strings, text, ACCOUNT, REGION};
use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};

const CALLERS: [&str; 4] = ["interruption", "schedule", "cluster-events", "forwarder"];

/// Granted actions no recorded call uses, and why each is needed all the same.
fn needed_without_a_call(caller: &str, action: &str) -> Option<&'static str> {
    Some(match action {
        "logs:CreateLogStream" | "logs:PutLogEvents" => "Lambda writes the function's logs to its log group with its role",
        "dynamodb:DeleteItem" => {
            "the previous release lets the lease go with it: its runs still in flight during a stack update finish under the new role"
        }
        "sqs:ReceiveMessage" | "sqs:DeleteMessage" | "sqs:GetQueueAttributes" if caller == "interruption" => {
            "Lambda's SQS event source mapping polls the queue and deletes handled messages with the function's role"
        }
        "sqs:GetQueueUrl" if caller == "interruption" => {
            "granted by the CDK's SqsEventSource (grantConsumeMessages) with the poller's actions; the SAM template does without"
        }
        "sqs:SendMessage" if caller == "schedule" || caller == "cluster-events" => {
            "Lambda's on-failure destination sends a failed asynchronous invocation to the dead-letter queue with the function's role"
        }
        "ec2:CreateNetworkInterface"
        | "ec2:DeleteNetworkInterface"
        | "ec2:AssignPrivateIpAddresses"
        | "ec2:UnassignPrivateIpAddresses"
        | "ec2:DescribeNetworkInterfaces" => "Lambda attaches the function to the VPC (private EKS endpoint) with its role",
        "ssm:GetParameter" if caller == "forwarder" => {
            "the forwarder reads the config from the same parameter as the functions (BALLAST_CONFIG_PARAMETER) and follows its changes"
        }
        "autoscaling:DescribeTags" if caller == "interruption" => {
            "routes a warning to a pool that selects its ASGs by tags (functions/core/src/reconcile/batch.rs locate); the test's pool selects by name (tests/tests/aws_moto.rs a_warning_is_routed_by_its_instance_not_by_describing_every_pool covers tags)"
        }
        "ec2:DescribeInstances" => {
            "tells spot from on-demand instances in a mixed-instances spot ASG (functions/aws/src/autoscaling.rs spot_instance_ids), and routes an event naming an instance gone from its ASG by its aws:autoscaling:groupName tag (functions/aws/src/compute.rs launched_by); the test's spot ASG buys spot only and its events name instances still in their ASG (tests/tests/gone_instances.rs covers routing)"
        }
        "autoscaling:CompleteLifecycleAction" if caller == "interruption" => {
            "completes a lifecycle action once drained; moto answers the heartbeat before it with HTTP 500, so the recorded run stops there (functions/aws/tests/lifecycle_requests.rs covers the request)"
        }
        "autoscaling:CompleteLifecycleAction" | "autoscaling:RecordLifecycleActionHeartbeat" | "autoscaling:TerminateInstanceInAutoScalingGroup"
            if caller != "interruption" =>
        {
            "reconcile is shared: any function's run finishes what a recorded plan started (a lifecycle action, a termination)"
        }
        "autoscaling:DescribeScalingActivities" | "autoscaling:SetDesiredCapacity" if caller == "cluster-events" => {
            "reconcile is shared: a demand event reconciles the pool like any other (observe spot activities, move capacity)"
        }
        _ => return None,
    })
}

fn now() -> DateTime<Utc> {
    "2026-11-20T09:12:10Z".parse().unwrap()
}

/// Runs every caller's code against moto; returns the calls each made.
async fn record() -> Option<Vec<Call>> {
    let moto = Moto::start_recording()?;
    let d = Deployment::create(&moto, 3, (0, 1), now()).await;
    let yaml = config_yaml(false, "");
    let config = Config::from_yaml(&yaml).unwrap();
    let parameter = "/ballast/test/config";
    aws_sdk_ssm_put(&d, parameter, &yaml).await;
    aws_sdk_eks::Client::new(&d.sdk)
        .create_cluster()
        .name(CLUSTER)
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().subnet_ids("subnet-1").build())
        .send()
        .await
        .unwrap();
    aws_sdk_eventbridge::Client::new(&d.sdk).create_event_bus().name("ballast-test").send().await.unwrap();
    let queue = d.events_queue("ballast-test-events", 10).await;
    let held = ballast_aws::DynamoStore::new(&d.sdk, TABLE);
    let mut inventory = Inventory::default();
    inventory.snapshot(&d).await;

    // Start-up, as each function's main: the config from SSM, the cluster from EKS.
    for f in ["interruption", "schedule", "cluster-events"] {
        let sdk = moto.sdk_as(f).await;
        let loaded = load_config(&ConfigSource::SsmParameter(parameter.into()), &sdk).await.expect("config from SSM");
        assert_eq!(loaded.cluster, config.cluster);
        // moto's cluster has a fake CA: connecting may fail after DescribeCluster, which is what counts.
        let _ = tokio::time::timeout(
            StdDuration::from_secs(10),
            connect_cluster("schedule", ClusterAccess::Eks, &loaded, &sdk),
        )
        .await;
    }

    // A cold start (a function's, the forwarder's) on a refused latest version looks for
    // the newest good one before it in the parameter's history.
    let ssm = aws_sdk_ssm::Client::new(&d.sdk);
    let bad = ssm
        .put_parameter()
        .name(parameter)
        .value("pools: [")
        .overwrite(true)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .unwrap()
        .version();
    for f in CALLERS {
        let sdk = moto.sdk_as(f).await;
        let home: Box<dyn ConfigHome> = if f == "forwarder" {
            Box::new(ballast_forwarder::follow::ParameterHome {
                client: aws_sdk_ssm::Client::new(&sdk),
                name: parameter.into(),
            })
        } else {
            Box::new(ballast_aws::ssm::ParameterHome::new(&sdk, parameter))
        };
        let earlier = home.earlier(bad, 20).await.expect("the parameter's history");
        assert_eq!(earlier.first().map(|v| v.text.as_str()), Some(yaml.as_str()), "{f}: the good version before");
    }
    ballast_aws::ssm::write(&ssm, parameter, &yaml).await.unwrap();

    // interruption: a warning while the pool is busy (retried within seconds), then handled;
    // a malformed message (dead-lettered).
    let sdk = moto.sdk_as("interruption").await;
    let (app, _) = d.app_as(config.clone(), "interruption", &sdk);
    let (_, spot_ids) = d.asg(SPOT).await;
    assert!(held
        .acquire_lease("general", "another-run", now(), StdDuration::from_secs(600), Urgency::CanWait)
        .await
        .unwrap());
    let warning = fixture_json("spot-interruption-terminate.json", |v| {
        v["id"] = json!("w-1");
        v["detail"]["instance-id"] = json!(spot_ids[0]);
        v["resources"] = json!([format!("arn:aws:ec2:eu-west-1:123456789012:instance/{}", spot_ids[0])]);
    });
    for body in [warning.to_string(), "{\"version\":\"0\",\"id\":".to_string()] {
        d.sqs.send_message().queue_url(&queue.url).message_body(body).send().await.unwrap();
    }
    let (handled, failed) = d.poll(&app, &queue).await;
    assert_eq!((handled.len(), failed.len()), (1, 1), "the malformed one dead-lettered, the busy one retried");
    held.release_lease("general", "another-run").await.unwrap();
    tokio::time::sleep(StdDuration::from_millis(5500)).await;
    let (handled, _) = d.poll(&app, &queue).await;
    assert_eq!(handled, vec![warning.to_string()]);
    inventory.snapshot(&d).await;

    // schedule: a pool in fallback fails back in steps (surge spot, drain, terminate
    // on-demand with decrement), then a headroom override.
    let sdk = moto.sdk_as("schedule").await;
    let (app, _) = d.app_as(config.clone(), "schedule", &sdk);
    let stored = held.load("general").await.unwrap();
    let record = PoolRecord {
        fallback_units: 1,
        fallback_since: Some(now() - Duration::hours(2)),
        healthy_since: [(SPOT.to_string(), now() - Duration::hours(1))].into(),
        ..stored.value
    };
    held.save("general", &record, stored.version).await.unwrap();
    for step in 0..6 {
        d.clock.advance(Duration::seconds(30));
        let tick = fixture_json("scheduled-reconcile.json", |v| {
            v["id"] = json!(format!("tick-{step}"));
            v["time"] = json!(d.clock.0.lock().unwrap().to_rfc3339());
        });
        app.direct(tick).await.expect("reconcile");
        inventory.snapshot(&d).await;
    }
    let override_event = fixture_json("scheduler-headroom-override.json", |v| {
        v["time"] = json!(d.clock.0.lock().unwrap().to_rfc3339());
    });
    app.direct(override_event).await.expect("override");

    // cluster-events: the forwarder's demand.
    let sdk = moto.sdk_as("cluster-events").await;
    let (app, _) = d.app_as(config.clone(), "cluster-events", &sdk);
    let at = d.clock.0.lock().unwrap().to_rfc3339();
    let demand = fixture_json("forwarder-pool-demand-changed.json", |v| {
        v["time"] = json!(at);
        v["detail"]["observed_at"] = json!(at);
    });
    app.direct(demand).await.expect("demand");

    // interruption again: a lifecycle action (moto cannot complete it: the calls are made,
    // and the message is retried). Last, as the pool record keeps it pending from then on.
    let sdk = moto.sdk_as("interruption").await;
    let (app, _) = d.app_as(config.clone(), "interruption", &sdk);
    let (_, spot_ids) = d.asg(SPOT).await;
    let lifecycle = fixture_json("lifecycle-terminate.json", |v| {
        v["time"] = json!(at);
        v["detail"]["AutoScalingGroupName"] = json!(SPOT);
        v["detail"]["EC2InstanceId"] = json!(spot_ids[0]);
    });
    d.sqs.send_message().queue_url(&queue.url).message_body(lifecycle.to_string()).send().await.unwrap();
    d.poll(&app, &queue).await;

    // The forwarder publishes to the stack's bus.
    let sdk = moto.sdk_as("forwarder").await;
    let bus = EventBridgeBus::new(&sdk, "ballast-test");
    let detail = PoolDemandDetail {
        shapes: Vec::new(),
        pool: "general".into(),
        cpu_millis: 1000,
        memory_bytes: 1 << 30,
        pods: 3,
        nodes: 2,
        observed_at: now(),
    };
    let results = bus.put(&[Outgoing::PoolDemand(detail)]).await.unwrap();
    assert_eq!(results, vec![None]);
    inventory.snapshot(&d).await;

    let mut calls: Vec<Call> = Vec::new();
    for request in moto.requests() {
        if !caller(&request).is_some_and(|c| CALLERS.contains(&c.as_str())) {
            continue; // the test's own setup
        }
        for call in inventory.calls(&request) {
            if !calls.contains(&call) {
                calls.push(call);
            }
        }
    }
    Some(calls)
}

async fn aws_sdk_ssm_put(d: &Deployment, name: &str, value: &str) {
    let ssm = aws_sdk_ssm::Client::new(&d.sdk);
    ssm.put_parameter().name(name).value(value).r#type(aws_sdk_ssm::types::ParameterType::String).send().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_is_allowed_by_both_templates_and_every_grant_is_used() {
    let Some(calls) = record().await else { return };
    let recorded: BTreeSet<(String, String)> = calls.iter().map(|c| (c.caller.clone(), c.action.clone())).collect();
    for caller in CALLERS {
        assert!(recorded.iter().any(|(c, _)| c == caller), "no call recorded for {caller}: {recorded:?}");
    }
    eprintln!("recorded calls (caller, action): {recorded:#?}");
    for must in [
        ("interruption", "eks:DescribeCluster"),
        ("schedule", "ssm:GetParameter"),
        ("schedule", "ssm:GetParameterHistory"),
        ("forwarder", "ssm:GetParameterHistory"),
        ("interruption", "sqs:ChangeMessageVisibility"),
        ("interruption", "sqs:SendMessage"),
        ("interruption", "autoscaling:TerminateInstanceInAutoScalingGroup"),
        ("interruption", "autoscaling:RecordLifecycleActionHeartbeat"),
        ("schedule", "autoscaling:SetDesiredCapacity"),
        ("forwarder", "events:PutEvents"),
    ] {
        assert!(recorded.contains(&(must.0.to_string(), must.1.to_string())), "{must:?} not recorded: {recorded:#?}");
    }

    let Some(refused) = refused(&calls, role_of) else { return };
    assert!(refused.is_empty(), "calls the roles would refuse: {refused:#?}");
    let mut templates = Vec::new();
    for v in VARIANTS {
        let Some(t) = rendered(v) else { return };
        templates.push((v, t));
    }

    // Every granted action: used by a recorded call of that caller, or listed with why.
    let mut unexplained = Vec::new();
    let mut listed = BTreeSet::new();
    for (v, t) in &templates {
        for caller in CALLERS {
            let (role, _) = role_of(t, caller);
            for (_, doc) in t.role_policies(&role) {
                let statements = match &doc["Statement"] {
                    Value::Array(s) => s.clone(),
                    other => vec![other.clone()],
                };
                for s in statements.iter().filter(|s| s["Effect"] == "Allow") {
                    for action in strings(&s["Action"]) {
                        if recorded.contains(&(caller.to_string(), action.clone())) {
                            continue;
                        }
                        match needed_without_a_call(caller, &action) {
                            Some(why) => {
                                listed.insert(format!("{caller} {action}: {why}"));
                            }
                            None => unexplained
                                .push(format!("{}: {caller} is granted {action}, which nothing uses", v.name())),
                        }
                    }
                }
            }
        }
    }
    eprintln!("granted without a recorded call, and why: {listed:#?}");
    assert!(unexplained.is_empty(), "{unexplained:#?}");
}

/// An ASG ARN and its tags as IAM sees them.
fn asg_call(caller: &str, action: &str, name: &str, tags: &[(&str, &str)]) -> Call {
    let mut context = BTreeMap::from([("aws:RequestedRegion".to_string(), Value::from(REGION))]);
    for (k, v) in tags {
        context.insert(format!("aws:ResourceTag/{k}"), Value::from(*v));
        context.insert(format!("autoscaling:ResourceTag/{k}"), Value::from(*v));
    }
    Call {
        caller: caller.into(),
        action: action.into(),
        resource: format!("arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:0b5a4c3e-1d2f-4a6b-8c9d-0e1f2a3b4c5d:autoScalingGroupName/{name}"),
        context,
    }
}

#[test]
fn the_roles_refuse_other_clusters_asgs_foreign_senders_and_other_publishers() {
    let mut cases = Vec::new();
    let mut expect: BTreeMap<String, &'static str> = BTreeMap::new();
    let mut templates = Vec::new();
    for v in VARIANTS {
        let Some(t) = rendered(v) else { return };
        templates.push((v, t));
    }
    let admin = "arn:aws:iam::123456789012:role/admin";
    let everything = vec![(
        "admin".to_string(),
        json!({ "Version": "2012-10-17", "Statement": [{ "Effect": "Allow", "Action": "*", "Resource": "*" }] }),
    )];
    for (v, t) in &templates {
        let mut add = |id: String, case: Case, want: &'static str| {
            expect.insert(id, want);
            cases.push(case);
        };
        for caller in ["interruption", "schedule", "cluster-events"] {
            let (role, arn) = role_of(t, caller);
            let policies = t.role_policies(&role);
            for action in [
                "autoscaling:SetDesiredCapacity",
                "autoscaling:TerminateInstanceInAutoScalingGroup",
                "autoscaling:CompleteLifecycleAction",
            ] {
                for (what, tags, want) in [
                    (
                        "this cluster's pool ASG",
                        vec![("ballast.io/pool", "general"), ("ballast.io/cluster", CLUSTER)],
                        "Allowed",
                    ),
                    (
                        "another cluster's pool ASG",
                        vec![("ballast.io/pool", "general"), ("ballast.io/cluster", "other")],
                        "ImplicitlyDenied",
                    ),
                    ("an ASG in no pool", vec![("ballast.io/cluster", CLUSTER)], "ImplicitlyDenied"),
                    ("an untagged ASG", vec![], "ImplicitlyDenied"),
                ] {
                    let id = format!("{}: {caller} {action} on {what}", v.name());
                    add(id.clone(), Case::new(id, &arn, &policies, &asg_call(caller, action, "eks-x", &tags)), want);
                }
            }
            // The bus takes nothing from the functions.
            let bus = format!("arn:aws:events:{REGION}:{ACCOUNT}:event-bus/ballast-{CLUSTER}");
            let call = Call {
                caller: caller.into(),
                action: "events:PutEvents".into(),
                resource: bus,
                context: BTreeMap::new(),
            };
            let id = format!("{}: {caller} puts events on the forwarder's bus", v.name());
            let mut case = Case::new(id.clone(), &arn, &policies, &call);
            case.resource_policy = resource_policy(t, &call);
            add(id, case, "Denied");
        }
        // An administrator of the account: the bus's and the queue's policies still refuse.
        let bus = format!("arn:aws:events:{REGION}:{ACCOUNT}:event-bus/ballast-{CLUSTER}");
        let call =
            Call { caller: "admin".into(), action: "events:PutEvents".into(), resource: bus, context: BTreeMap::new() };
        let id = format!("{}: an administrator puts events on the forwarder's bus", v.name());
        let mut case = Case::new(id.clone(), admin, &everything, &call);
        case.resource_policy = resource_policy(t, &call);
        add(id, case, "ExplicitlyDenied");
        let queue = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:ballast-{CLUSTER}-events");
        let call = Call {
            caller: "admin".into(),
            action: "sqs:SendMessage".into(),
            resource: queue.clone(),
            context: BTreeMap::new(),
        };
        let id = format!("{}: an administrator sends to the events queue", v.name());
        let mut case = Case::new(id.clone(), admin, &everything, &call);
        case.resource_policy = resource_policy(t, &call);
        add(id, case, "ExplicitlyDenied");
        // EventBridge, for each of the stack's rules and for a rule of someone else's.
        let rules: Vec<String> = t
            .of_kind("AWS::Events::Rule")
            .filter(|(_, r)| r.properties["EventBusName"].is_null())
            .map(|(_, r)| format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{}", text(&r.properties["Name"])))
            .chain(std::iter::once(format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/someone-elses-rule")))
            .collect();
        for rule in rules {
            let want = if rule.ends_with("someone-elses-rule") { "Denied" } else { "Allowed" };
            let context = BTreeMap::from([("aws:SourceArn".to_string(), Value::from(rule.clone()))]);
            let call =
                Call { caller: "events".into(), action: "sqs:SendMessage".into(), resource: queue.clone(), context };
            let id = format!("{}: EventBridge rule {rule} sends to the events queue", v.name());
            let mut case = Case::new(id.clone(), "events.amazonaws.com", &[], &call);
            case.resource_policy = resource_policy(t, &call);
            add(id, case, want);
        }
    }
    let Some(results) = evaluate(&cases) else { return };
    let wrong: Vec<String> = expect
        .iter()
        .filter(|(id, want)| {
            let got = results[*id].0.as_str();
            match **want {
                "Denied" => got != "ExplicitlyDenied" && got != "ImplicitlyDenied",
                want => got != want,
            }
        })
        .map(|(id, want)| format!("{id}: want {want}, got {:?}", results[id]))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_previous_releases_lease_calls_are_still_allowed_while_a_stack_update_rolls_out() {
    // CloudFormation updates each function's role (its policy) before the function's code,
    // and invocations of the previous code in flight (a drain: up to drain_timeout, 15 min)
    // finish under the new role. The previous release took the lease with PutItem and let
    // it go (after each run, and before each drain) with DeleteItem conditional on owner.
    // Refused, its lease would stay held for its whole time.
    let table = format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}");
    let context = BTreeMap::from([
        ("aws:RequestedRegion".to_string(), Value::from(REGION)),
        ("aws:SecureTransport".to_string(), Value::from("true")),
    ]);
    let mut calls = Vec::new();
    for caller in ["interruption", "schedule", "cluster-events"] {
        for action in ["dynamodb:PutItem", "dynamodb:DeleteItem"] {
            calls.push(Call {
                caller: caller.into(),
                action: action.into(),
                resource: table.clone(),
                context: context.clone(),
            });
        }
    }
    let Some(refused) = refused(&calls, role_of) else { return };
    assert!(refused.is_empty(), "the previous release's lease calls the new roles refuse: {refused:#?}");
}

#[test]
fn an_operator_cannot_send_dead_letters_back_to_the_events_queue_so_replay_invokes_the_function() {
    // The events queue takes messages from the stack's rules only, whoever asks: a replay
    // that sent letters back there would be refused. `ballast dead-letters
    // --replay` invokes the interruption function instead; an operator with the permissions of
    // docs/src/operations.md (dead letters) may.
    let dlq = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:ballast-{CLUSTER}-events-dlq");
    let queue = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:ballast-{CLUSTER}-events");
    let function = format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:ballast-{CLUSTER}-interruption");
    let operator = "arn:aws:iam::123456789012:role/operator";
    let policies = vec![(
        "dead-letters".to_string(),
        json!({ "Version": "2012-10-17", "Statement": [
            { "Effect": "Allow", "Action": ["sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage"], "Resource": dlq },
            { "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": queue },
            { "Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": function }
        ]}),
    )];
    let context = BTreeMap::from([
        ("aws:RequestedRegion".to_string(), Value::from(REGION)),
        ("aws:SecureTransport".to_string(), Value::from("true")),
    ]);
    let mut cases = Vec::new();
    for v in VARIANTS {
        let Some(t) = rendered(v) else { return };
        for (action, resource, want) in [
            ("sqs:SendMessage", &queue, "ExplicitlyDenied"),
            ("lambda:InvokeFunction", &function, "Allowed"),
            ("sqs:DeleteMessage", &dlq, "Allowed"),
        ] {
            let call = Call {
                caller: "operator".into(),
                action: action.into(),
                resource: resource.clone(),
                context: context.clone(),
            };
            let mut case = Case::new(format!("{}: {action} {want}", v.name()), operator, &policies, &call);
            case.resource_policy = resource_policy(&t, &call);
            cases.push(case);
        }
    }
    let Some(results) = evaluate(&cases) else { return };
    assert_eq!(results.len(), 3 * VARIANTS.len());
    let wrong: Vec<String> = results
        .iter()
        .filter(|(id, (r, _))| !id.ends_with(r.as_str()))
        .map(|(id, (r, _))| format!("{id}: {r}"))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Evaluates `cases` and returns those whose result is not what each wants (`Denied`:
/// either denial).
fn judge(cases: Vec<(Case, &'static str)>) -> Option<Vec<String>> {
    let want: BTreeMap<String, &str> = cases.iter().map(|(c, w)| (c.id.clone(), *w)).collect();
    let cases: Vec<Case> = cases.into_iter().map(|(c, _)| c).collect();
    let results = evaluate(&cases)?;
    assert_eq!(results.len(), want.len());
    Some(
        want.iter()
            .filter(|(id, want)| {
                let got = results[*id].0.as_str();
                match **want {
                    "Denied" => got != "ExplicitlyDenied" && got != "ImplicitlyDenied",
                    want => got != want,
                }
            })
            .map(|(id, want)| format!("{id}: want {want}, got {:?}", results[id]))
            .collect(),
    )
}

#[test]
fn only_the_three_functions_may_send_to_the_dead_letter_queue_and_only_over_tls() {
    // `ballast dead-letters --replay` acts on what it reads there: no one else may plant it.
    let dlq = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:ballast-{CLUSTER}-events-dlq");
    let queue = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:ballast-{CLUSTER}-events");
    let admin = "arn:aws:iam::123456789012:role/admin";
    let everything = vec![(
        "admin".to_string(),
        json!({ "Version": "2012-10-17", "Statement": [{ "Effect": "Allow", "Action": "*", "Resource": "*" }] }),
    )];
    let send = |caller: &str, tls: bool| Call {
        caller: caller.into(),
        action: "sqs:SendMessage".into(),
        resource: dlq.clone(),
        context: BTreeMap::from([
            ("aws:RequestedRegion".to_string(), Value::from(REGION)),
            ("aws:SecureTransport".to_string(), Value::from(if tls { "true" } else { "false" })),
        ]),
    };
    let mut cases = Vec::new();
    for v in VARIANTS {
        let Some(t) = rendered(v) else { return };
        let mut add = |what: String, arn: &str, policies: &[(String, Value)], call: Call, want| {
            let mut case = Case::new(format!("{}: {what}", v.name()), arn, policies, &call);
            case.resource_policy = resource_policy(&t, &call);
            assert!(case.resource_policy.is_some(), "{}: the dead-letter queue has no policy", v.name());
            cases.push((case, want));
        };
        for caller in ["interruption", "schedule", "cluster-events"] {
            let (role, arn) = role_of(&t, caller);
            let policies = t.role_policies(&role);
            add(format!("{caller} sends"), &arn, &policies, send(caller, true), "Allowed");
            add(format!("{caller} sends without TLS"), &arn, &policies, send(caller, false), "ExplicitlyDenied");
        }
        let (role, arn) = role_of(&t, "forwarder");
        add("the forwarder sends".into(), &arn, &t.role_policies(&role), send("forwarder", true), "Denied");
        add("an administrator sends".into(), admin, &everything, send("admin", true), "ExplicitlyDenied");
        // Only the events queue may redrive to it.
        let dead = t
            .find("AWS::SQS::Queue", "QueueName", &format!("ballast-{CLUSTER}-events-dlq"))
            .expect("the dead-letter queue");
        let redrive = &dead.properties["RedriveAllowPolicy"];
        let redrive: Value = match redrive {
            Value::String(s) => serde_json::from_str(s).unwrap(),
            other => other.clone(),
        };
        assert_eq!(redrive, json!({ "redrivePermission": "byQueue", "sourceQueueArns": [queue] }), "{}", v.name());
    }
    let Some(wrong) = judge(cases) else { return };
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn only_this_clusters_forwarder_service_account_may_assume_its_role() {
    // EKS Pod Identity assumes the role with session tags naming the pod's cluster,
    // namespace and service account; without conditions on them any association of the
    // account could.
    let cluster_arn = format!("arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER}");
    let tags = |cluster: &str, namespace: &str, account: &str| {
        BTreeMap::from([
            ("aws:SourceAccount".to_string(), Value::from(ACCOUNT)),
            ("aws:RequestTag/eks-cluster-arn".to_string(), Value::from(cluster.replace("ACCOUNT", ACCOUNT))),
            ("aws:RequestTag/eks-cluster-name".to_string(), Value::from(cluster.rsplit('/').next().unwrap())),
            ("aws:RequestTag/kubernetes-namespace".to_string(), Value::from(namespace)),
            ("aws:RequestTag/kubernetes-service-account".to_string(), Value::from(account)),
        ])
    };
    let other_cluster = format!("arn:aws:eks:{REGION}:{ACCOUNT}:cluster/other");
    let mut cases = Vec::new();
    for v in VARIANTS {
        let Some(t) = rendered(v) else { return };
        let (_, role_arn) = t.forwarder_role();
        let role = t
            .of_kind("AWS::IAM::Role")
            .map(|(_, r)| r)
            .find(|r| r.properties["AssumeRolePolicyDocument"].to_string().contains("pods.eks.amazonaws.com"))
            .unwrap();
        let trust = role.properties["AssumeRolePolicyDocument"].clone();
        for action in ["sts:AssumeRole", "sts:TagSession"] {
            for (what, context, want) in [
                (
                    "ballast/ballast-forwarder of this cluster",
                    tags(&cluster_arn, "ballast", "ballast-forwarder"),
                    "Allowed",
                ),
                ("another namespace", tags(&cluster_arn, "default", "ballast-forwarder"), "Denied"),
                ("another service account", tags(&cluster_arn, "ballast", "default"), "Denied"),
                ("another cluster", tags(&other_cluster, "ballast", "ballast-forwarder"), "Denied"),
                (
                    "no session tags",
                    BTreeMap::from([("aws:SourceAccount".to_string(), Value::from(ACCOUNT))]),
                    "Denied",
                ),
            ] {
                let call = Call { caller: "pods".into(), action: action.into(), resource: role_arn.clone(), context };
                let mut case =
                    Case::new(format!("{}: {action} by {what}", v.name()), "pods.eks.amazonaws.com", &[], &call);
                case.resource_policy = Some(trust.clone());
                cases.push((case, want));
            }
        }
    }
    let Some(wrong) = judge(cases) else { return };
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_read_only_wildcard_statements_hold_only_in_the_stacks_region() {
    let mut cases = Vec::new();
    for v in VARIANTS {
        let Some(t) = rendered(v) else { return };
        let vpc = t
            .of_kind("AWS::IAM::ManagedPolicy")
            .any(|(_, p)| p.properties["PolicyDocument"].to_string().contains("ec2:DescribeNetworkInterfaces"));
        for caller in ["interruption", "schedule", "cluster-events"] {
            let (role, arn) = role_of(&t, caller);
            let policies = t.role_policies(&role);
            let mut actions = vec![
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeScalingActivities",
                "ec2:DescribeInstances",
            ];
            if caller == "interruption" {
                actions.extend(["autoscaling:DescribeAutoScalingInstances", "autoscaling:DescribeTags"]);
            }
            if vpc {
                actions.push("ec2:DescribeNetworkInterfaces");
            }
            for action in actions {
                for (region, want) in [(REGION, "Allowed"), ("us-east-1", "Denied")] {
                    let call = Call {
                        caller: caller.into(),
                        action: action.into(),
                        resource: "*".into(),
                        context: BTreeMap::from([("aws:RequestedRegion".to_string(), Value::from(region))]),
                    };
                    let case =
                        Case::new(format!("{}: {caller} {action} in {region}", v.name()), &arn, &policies, &call);
                    cases.push((case, want));
                }
            }
        }
        // The forwarder reads the config parameter, and no other.
        let (role, arn) = role_of(&t, "forwarder");
        let policies = t.role_policies(&role);
        for (parameter, want) in
            [(format!("ballast/{CLUSTER}/config"), "Allowed"), ("ballast/other/config".to_string(), "Denied")]
        {
            let call = Call {
                caller: "forwarder".into(),
                action: "ssm:GetParameter".into(),
                resource: format!("arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/{parameter}"),
                context: BTreeMap::from([("aws:RequestedRegion".to_string(), Value::from(REGION))]),
            };
            cases.push((
                Case::new(format!("{}: the forwarder reads /{parameter}", v.name()), &arn, &policies, &call),
                want,
            ));
        }
    }
    let Some(wrong) = judge(cases) else { return };
    assert!(wrong.is_empty(), "{wrong:#?}");
}
