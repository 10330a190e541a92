//! The wiring of both templates, read as deployed: the SAM template translated to plain
//! CloudFormation by aws-sam-translator and the CDK app's synthesized templates, each with
//! and without a VPC, rendered with the moto deployment's names. Each invariant below is
//! one a deployment needs to work, or to keep what it is given.

use std::collections::BTreeSet;

use ballast_core::function::Function;
use ballast_lambda::metrics::{DECISION_METRICS, OTHER_METRICS};
use ballast_tests::templates::{rendered, strings, text, Template, Variant, ACCOUNT, REGION};
use serde_json::{json, Value};

const FUNCTIONS: [&str; 3] = Function::NAMES;

fn each(check: impl Fn(Variant, &Template) -> Vec<String>) {
    let mut wrong = Vec::new();
    for variant in Variant::ALL {
        let Some(template) = rendered(variant) else { continue };
        wrong.extend(check(variant, &template).into_iter().map(|w| format!("{}: {w}", variant.name())));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The cluster name a variant is deployed for.
fn cluster(variant: Variant) -> &'static str {
    match variant {
        Variant::Cdk => "prod-eks",
        _ => "test",
    }
}

fn function_name(variant: Variant, f: &str) -> String {
    format!("ballast-{}-{f}", cluster(variant))
}

/// The statements of every policy of a role, each with its policy's name.
fn statements(t: &Template, role: &str) -> Vec<(String, Value)> {
    t.role_policies(role)
        .into_iter()
        .flat_map(|(name, doc)| {
            let list = match &doc["Statement"] {
                Value::Array(s) => s.clone(),
                other => vec![other.clone()],
            };
            list.into_iter().map(move |s| (name.clone(), s))
        })
        .collect()
}

fn allows(statement: &Value, action: &str) -> bool {
    statement["Effect"] == "Allow" && strings(&statement["Action"]).iter().any(|a| a == action)
}

/// The templates deploy the functions `Function` names and no other, each as
/// `ballast-CLUSTER-NAME`; the SAM template under `Function::logical_id` too.
#[test]
fn the_templates_deploy_exactly_the_functions_ballast_names() {
    each(|variant, t| {
        let deployed: BTreeSet<(String, String)> = t
            .of_kind("AWS::Lambda::Function")
            .map(|(id, r)| (id.clone(), text(&r.properties["FunctionName"])))
            .collect();
        let names: BTreeSet<String> = deployed.iter().map(|(_, name)| name.clone()).collect();
        let want: BTreeSet<String> = Function::ALL.iter().map(|f| f.deployed_name(cluster(variant))).collect();
        let mut wrong = Vec::new();
        if names != want {
            wrong.push(format!("functions {names:?}, want {want:?}"));
        }
        if matches!(variant, Variant::Sam | Variant::SamVpc) {
            for f in Function::ALL {
                let name = f.deployed_name(cluster(variant));
                if !deployed.contains(&(f.logical_id().to_string(), name.clone())) {
                    wrong.push(format!("{name}: not under the logical id {}: {deployed:?}", f.logical_id()));
                }
            }
        }
        wrong
    });
}

#[test]
fn every_function_may_describe_its_cluster_and_nothing_else_of_eks() {
    each(|variant, t| {
        let roles = t.function_roles();
        let arn = format!("arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{}", cluster(variant));
        let mut wrong = Vec::new();
        for f in FUNCTIONS {
            let role = &roles[&function_name(variant, f)];
            let grants: Vec<Vec<String>> = statements(t, role)
                .iter()
                .filter(|(_, s)| allows(s, "eks:DescribeCluster"))
                .map(|(_, s)| strings(&s["Resource"]))
                .collect();
            if grants != vec![vec![arn.clone()]] {
                wrong.push(format!("{f}: eks:DescribeCluster granted on {grants:?}, want exactly [{arn}]"));
            }
        }
        wrong
    });
}

#[test]
fn the_queue_keeps_a_message_through_every_redrive_and_the_dead_letter_queue_longer() {
    each(|variant, t| {
        let queue = t.find("AWS::SQS::Queue", "QueueName", &format!("ballast-{}-events", cluster(variant))).unwrap();
        let dlq = t.find("AWS::SQS::Queue", "QueueName", &format!("ballast-{}-events-dlq", cluster(variant))).unwrap();
        let n = |v: &Value| text(v).parse::<u64>().unwrap_or_else(|_| panic!("a number: {v}"));
        let visibility = n(&queue.properties["VisibilityTimeout"]);
        let retention = n(&queue.properties["MessageRetentionPeriod"]);
        let receives = n(&queue.properties["RedrivePolicy"]["maxReceiveCount"]);
        let dlq_retention = n(&dlq.properties["MessageRetentionPeriod"]);
        let mut wrong = Vec::new();
        // Margin: twice what the receives could take if every one timed out.
        if retention < 2 * visibility * receives {
            wrong.push(format!(
                "retention {retention} s < 2 x VisibilityTimeout {visibility} s x maxReceiveCount {receives}: a retried message expires before it is dead-lettered"
            ));
        }
        if dlq_retention <= retention {
            wrong.push(format!("dead-letter retention {dlq_retention} s not longer than the queue's {retention} s"));
        }
        wrong.extend(visibility_is_six_function_timeouts(variant, t));
        wrong
    });
}

/// The events queue's visibility timeout is six times its consumer's timeout, as Lambda's
/// SQS integration recommends, and no more: a crashed batch hides its Spot warnings
/// (worthless after two minutes) and lifecycle actions for that long.
fn visibility_is_six_function_timeouts(variant: Variant, t: &Template) -> Vec<String> {
    let queue = t.find("AWS::SQS::Queue", "QueueName", &format!("ballast-{}-events", cluster(variant))).unwrap();
    let visibility = text(&queue.properties["VisibilityTimeout"]).parse::<u64>().unwrap_or(0);
    let function = t.find("AWS::Lambda::Function", "FunctionName", &function_name(variant, "interruption")).unwrap();
    let timeout = text(&function.properties["Timeout"]).parse::<u64>().unwrap_or(0);
    if timeout == 0 || visibility != 6 * timeout {
        vec![format!("VisibilityTimeout {visibility} s is not 6 x the interruption function's timeout {timeout} s")]
    } else {
        Vec::new()
    }
}

#[test]
fn the_queues_visibility_follows_every_function_timeout_sam_allows() {
    use ballast_tests::templates::{sam_parameters, sam_translated};
    let Some(raw) = sam_translated() else { return };
    let allowed = raw["Parameters"]["FunctionTimeoutSeconds"]["AllowedValues"].as_array().cloned().unwrap_or_default();
    assert!(allowed.len() >= 10, "FunctionTimeoutSeconds allows {allowed:?}");
    let mut wrong = Vec::new();
    for timeout in allowed {
        let mut parameters = sam_parameters(false);
        parameters.insert("FunctionTimeoutSeconds", timeout.clone());
        let t = Template::render(&raw, &parameters);
        wrong.extend(
            visibility_is_six_function_timeouts(Variant::Sam, &t).into_iter().map(|w| format!("{timeout}: {w}")),
        );
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_interruption_function_knows_the_queues_last_receive() {
    // On that receive a message still failing is dead-lettered by the function with its
    // errors; told a larger number, the redrive policy would move it there with none.
    each(|variant, t| {
        let queue = t.find("AWS::SQS::Queue", "QueueName", &format!("ballast-{}-events", cluster(variant))).unwrap();
        let receives = text(&queue.properties["RedrivePolicy"]["maxReceiveCount"]);
        let function =
            t.find("AWS::Lambda::Function", "FunctionName", &function_name(variant, "interruption")).unwrap();
        let told = text(&function.properties["Environment"]["Variables"]["BALLAST_MAX_RECEIVES"]);
        if told != receives {
            vec![format!("BALLAST_MAX_RECEIVES is `{told}`, the queue's maxReceiveCount {receives}")]
        } else {
            Vec::new()
        }
    });
}

/// Evaluates a CloudFormation rule expression (the functions rules allow that the
/// template uses) over parameters given as text, as CloudFormation does before a deploy.
fn rule_value(raw: &Value, v: &Value, given: &std::collections::BTreeMap<&str, &str>) -> Value {
    let param = |name: &str| -> Value {
        let p = &raw["Parameters"][name];
        let value = given.get(name).map(|s| s.to_string()).unwrap_or_else(|| text(&p["Default"]));
        if text(&p["Type"]).contains("List") {
            Value::from(value.split(',').map(str::to_string).collect::<Vec<_>>())
        } else {
            Value::from(value)
        }
    };
    let args = |f: &str| v[f].as_array().cloned().unwrap_or_default();
    let eval = |x: &Value| rule_value(raw, x, given);
    let Some(key) = v.as_object().and_then(|o| o.keys().next().cloned()) else { return v.clone() };
    match key.as_str() {
        "Ref" => param(v["Ref"].as_str().unwrap()),
        "Fn::Not" => Value::from(!eval(&args("Fn::Not")[0]).as_bool().unwrap()),
        "Fn::And" => Value::from(args("Fn::And").iter().all(|x| eval(x).as_bool().unwrap())),
        "Fn::Equals" => Value::from(eval(&args("Fn::Equals")[0]) == eval(&args("Fn::Equals")[1])),
        "Fn::EachMemberEquals" => {
            let a = args("Fn::EachMemberEquals");
            let want = eval(&a[1]);
            Value::from(eval(&a[0]).as_array().unwrap().iter().all(|m| *m == want))
        }
        other => panic!("a rule function this test does not evaluate: {other}"),
    }
}

/// The rules' assertions that fail for these parameters (their descriptions).
fn failed_rules(raw: &Value, given: &std::collections::BTreeMap<&str, &str>) -> Vec<String> {
    let mut failed = Vec::new();
    for (_, rule) in raw["Rules"].as_object().into_iter().flatten() {
        let applies = rule.get("RuleCondition").is_none_or(|c| rule_value(raw, c, given).as_bool().unwrap());
        if !applies {
            continue;
        }
        for a in rule["Assertions"].as_array().into_iter().flatten() {
            if !rule_value(raw, &a["Assert"], given).as_bool().unwrap() {
                failed.push(text(&a["AssertDescription"]));
            }
        }
    }
    failed
}

#[test]
fn vpc_mode_is_refused_before_deploying_unless_it_is_whole() {
    use ballast_tests::templates::{sam_translated, SECURITY_GROUPS, SUBNETS, VPC};
    let Some(raw) = sam_translated() else { return };
    let (subnets, groups) = (SUBNETS.join(","), SECURITY_GROUPS.join(","));
    let (subnets, groups) = (subnets.as_str(), groups.as_str());
    fn with<'a>(pairs: &[(&'a str, &'a str)]) -> std::collections::BTreeMap<&'a str, &'a str> {
        pairs.iter().copied().collect()
    }
    assert!(failed_rules(&raw, &with(&[])).is_empty(), "no VPC: nothing to check");
    let whole = with(&[("SubnetIds", subnets), ("SecurityGroupIds", groups), ("VpcId", VPC)]);
    assert!(failed_rules(&raw, &whole).is_empty());
    // Subnets without their VPC: the interface permissions would name vpc/ (none).
    let no_vpc = failed_rules(&raw, &with(&[("SubnetIds", subnets), ("SecurityGroupIds", groups)]));
    assert!(no_vpc.len() == 1 && no_vpc[0].contains("VpcId"), "{no_vpc:?}");
    let no_groups = failed_rules(&raw, &with(&[("SubnetIds", subnets), ("VpcId", VPC)]));
    assert!(no_groups.len() == 1 && no_groups[0].contains("SecurityGroupIds"), "{no_groups:?}");
    // The VPC endpoints need the VPC, and the route tables of the DynamoDB gateway.
    let tables = ballast_tests::templates::ROUTE_TABLES.join(",");
    let endpoints = [("CreateVpcEndpoints", "true"), ("VpcEndpointRouteTableIds", tables.as_str())];
    let no_network = failed_rules(&raw, &with(&endpoints));
    assert!(no_network.len() == 1 && no_network[0].contains("SubnetIds"), "{no_network:?}");
    let mut whole_with_endpoints = whole.clone();
    whole_with_endpoints.extend(endpoints);
    assert!(failed_rules(&raw, &whole_with_endpoints).is_empty());
    whole_with_endpoints.remove("VpcEndpointRouteTableIds");
    let no_tables = failed_rules(&raw, &whole_with_endpoints);
    assert!(no_tables.len() == 1 && no_tables[0].contains("VpcEndpointRouteTableIds"), "{no_tables:?}");
}

#[test]
fn the_vpc_mode_creates_the_endpoints_the_functions_call_and_lists_them() {
    use ballast_tests::templates::{ROUTE_TABLES, SECURITY_GROUPS, SUBNETS, VPC};
    // What the functions call: config, credentials and the EKS token's STS, the cluster,
    // the ASGs, the instances, the queue, EventBridge, their logs; DynamoDB by gateway.
    let interface = ["ssm", "sts", "eks", "autoscaling", "ec2", "sqs", "events", "logs"];
    each(|variant, t| {
        let mut wrong = Vec::new();
        let vpc = matches!(variant, Variant::SamVpc | Variant::CdkVpc);
        let mut services = BTreeSet::new();
        for (id, e) in t.of_kind("AWS::EC2::VPCEndpoint") {
            let p = &e.properties;
            let service = text(&p["ServiceName"]);
            let short = service.strip_prefix(&format!("com.amazonaws.{REGION}.")).unwrap_or(&service).to_string();
            let ok = match text(&p["VpcEndpointType"]).as_str() {
                "Interface" => {
                    strings(&p["SubnetIds"]) == SUBNETS
                        && strings(&p["SecurityGroupIds"]) == SECURITY_GROUPS
                        && text(&p["PrivateDnsEnabled"]) == "true"
                }
                "Gateway" => short == "dynamodb" && strings(&p["RouteTableIds"]) == ROUTE_TABLES,
                _ => false,
            };
            if !ok || text(&p["VpcId"]) != VPC {
                wrong.push(format!("endpoint {id}: {p}"));
            }
            services.insert(short);
        }
        let want: BTreeSet<String> = if vpc {
            interface.iter().chain(["dynamodb"].iter()).map(|s| s.to_string()).collect()
        } else {
            BTreeSet::new()
        };
        if services != want {
            wrong.push(format!("endpoints for {services:?}, want {want:?}"));
        }
        wrong
    });
}

#[test]
fn the_cdk_app_checks_its_vpc_and_config_name_before_synth_and_maps_access_on_request() {
    let dir = ballast_tests::repo_root().join("infra/cdk");
    if !dir.join("node_modules/ts-node").exists() {
        assert!(!ballast_tests::moto::required(), "CI=true but infra/cdk has no node_modules: run scripts/test");
        eprintln!("skipped: infra/cdk not installed (scripts/test runs npm ci there)");
        return;
    }
    // The stack as the app builds it (no bundling), for each set of props.
    let script = r#"
const { App } = require('aws-cdk-lib');
const eks = require('aws-cdk-lib/aws-eks');
const { BallastStack } = require('./lib/ballast-stack');
const base = {
  env: { account: '123456789012', region: 'eu-west-1' }, clusterName: 'test', configParameterName: '',
  accessEntries: true, stateTableName: 'ballast-test-state', vpcId: 'vpc-0123456789abcdef0',
  subnetIds: ['subnet-0aaaaaaaaaaaaaaa1', 'subnet-0bbbbbbbbbbbbbbb2'], securityGroupIds: ['sg-0123456789abcdef0'],
  availabilityZones: ['eu-west-1a', 'eu-west-1b'], createVpcEndpoints: false, routeTableIds: [],
};
const cases = JSON.parse(process.argv[1]);
for (const [name, extra] of cases) {
  const app = new App();
  app.node.setContext('aws:cdk:bundling-stacks', []);
  try {
    const stack = new BallastStack(app, 'ballast-test', { ...base, ...extra });
    const entries = stack.node.findAll().filter((c) => c instanceof eks.CfnAccessEntry).length;
    console.log(`${name}: ok, ${entries} access entries`);
  }
  catch (e) { console.log(`${name}: ${e.message}`); }
}
"#;
    let subnets3 = json!(["subnet-1", "subnet-2", "subnet-3"]);
    let cases = json!([
        ["fits", {}],
        ["on CONFIG_MAP authentication", { "accessEntries": false }],
        ["no zones", { "availabilityZones": [] }],
        ["another region", { "availabilityZones": ["us-east-1a", "us-east-1b"] }],
        ["a zone twice", { "availabilityZones": ["eu-west-1a", "eu-west-1a"] }],
        ["uneven", { "subnetIds": subnets3 }],
        ["endpoints without route tables", { "createVpcEndpoints": true }],
        ["endpoints without a VPC", { "createVpcEndpoints": true, "routeTableIds": ["rtb-1"], "subnetIds": [], "availabilityZones": [] }],
        ["a config name without /", { "configParameterName": "ballast/test/config" }],
    ]);
    let out = std::process::Command::new("node")
        .current_dir(&dir)
        .env("TS_NODE_TRANSPILE_ONLY", "1")
        .args(["-r", "ts-node/register", "-e", script, &cases.to_string()])
        .output()
        .expect("node runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for (case, want) in [
        ("fits", "ok, 3 access entries"),
        ("on CONFIG_MAP authentication", "ok, 0 access entries"),
        ("no zones", "subnetIds needs availabilityZones"),
        ("another region", "not zones of the stack's region eu-west-1"),
        ("a zone twice", "a zone is given twice"),
        ("uneven", "3 subnetIds over 2 availabilityZones"),
        ("endpoints without route tables", "createVpcEndpoints needs routeTableIds"),
        ("endpoints without a VPC", "createVpcEndpoints needs subnetIds"),
        ("a config name without /", "a parameter name starting with /"),
    ] {
        let line = text.lines().find(|l| l.starts_with(&format!("{case}: "))).unwrap_or_default();
        assert!(line.contains(want), "{case}: want `{want}`, got `{line}` in:\n{text}");
    }
}

#[test]
fn every_name_fits_aws_limits_with_the_longest_cluster_name_allowed() {
    use ballast_tests::templates::{sam_parameters, sam_translated};
    let Some(raw) = sam_translated() else { return };
    // The longest name ClusterName's pattern admits (`{0,N}` after the first character).
    let pattern = text(&raw["Parameters"]["ClusterName"]["AllowedPattern"]);
    let most: usize = pattern.rsplit_once(",").and_then(|(_, n)| n.split('}').next()?.parse().ok()).unwrap();
    let longest = "c".repeat(most + 1);
    let mut parameters = sam_parameters(true);
    parameters.insert("ClusterName", Value::from(longest.clone()));
    // A pool name as long as a cluster's, with the override schedule on.
    parameters.insert("HeadroomOverrideCron", Value::from("cron(30 8 ? * MON-FRI *)"));
    parameters.insert("HeadroomOverridePool", Value::from(longest.clone()));
    let t = Template::render(&raw, &parameters);
    let limits = [
        ("AWS::Events::Rule", "Name", 64),
        ("AWS::Scheduler::Schedule", "Name", 64),
        ("AWS::Lambda::Function", "FunctionName", 64),
        ("AWS::IAM::Role", "RoleName", 64),
        ("AWS::SQS::Queue", "QueueName", 80),
        ("AWS::SNS::Topic", "TopicName", 256),
        ("AWS::CloudWatch::Alarm", "AlarmName", 255),
        ("AWS::Logs::LogGroup", "LogGroupName", 512),
    ];
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (kind, field, limit) in limits {
        for (id, r) in t.of_kind(kind) {
            let name = text(&r.properties[field]);
            if name.is_empty() {
                continue;
            }
            checked += 1;
            assert!(name.contains(&longest), "{id}: {name} is not named after the cluster");
            if name.len() > limit {
                wrong.push(format!("{id} ({kind}): {field} {name} is {} characters, over {limit}", name.len()));
            }
        }
    }
    assert!(checked >= 15, "only {checked} names checked");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn a_tick_is_never_throttled_behind_a_drain_and_a_waiting_override() {
    // A tick during a drain returns at once (the lease holder covers it), but only if it
    // can run: a slot for the draining run, one for a headroom override waiting for the
    // lease, one for the tick. Throttled, ticks expire into the dead-letter queue.
    each(|variant, t| {
        let name = function_name(variant, "schedule");
        let function = t.find("AWS::Lambda::Function", "FunctionName", &name).unwrap();
        let reserved = &function.properties["ReservedConcurrentExecutions"];
        match text(reserved).parse::<u32>() {
            Ok(n) if n < 3 => vec![format!("schedule's reserved concurrency is {n}, want at least 3")],
            _ => Vec::new(),
        }
    });
}

#[test]
fn the_queue_is_polled_with_a_maximum_concurrency_the_function_reserves() {
    each(|variant, t| {
        let mut wrong = Vec::new();
        let name = function_name(variant, "interruption");
        let function = t.find("AWS::Lambda::Function", "FunctionName", &name).unwrap();
        let reserved = text(&function.properties["ReservedConcurrentExecutions"]).parse::<u32>().unwrap_or(0);
        let mappings: Vec<&Value> = t
            .of_kind("AWS::Lambda::EventSourceMapping")
            .map(|(_, m)| &m.properties)
            .filter(|p| text(&p["FunctionName"]) == name)
            .collect();
        match mappings.as_slice() {
            [m] => {
                let max = text(&m["ScalingConfig"]["MaximumConcurrency"]).parse::<u32>().unwrap_or(0);
                if !(2..=1000).contains(&max) {
                    wrong.push(format!("the event source mapping's MaximumConcurrency is {max}, want 2..=1000"));
                }
                // Fewer reserved and the pollers' invocations are throttled in a storm;
                // none reserved and other functions of the account can starve it.
                if reserved < max {
                    wrong.push(format!(
                        "interruption reserves {reserved} executions, under the queue's MaximumConcurrency {max}"
                    ));
                }
                if !strings(&m["FunctionResponseTypes"]).contains(&"ReportBatchItemFailures".to_string()) {
                    wrong.push("no ReportBatchItemFailures".into());
                }
            }
            other => wrong.push(format!("{} event source mappings for interruption", other.len())),
        }
        wrong
    });
}

/// The rules whose target is `arn`.
fn rules_targeting(t: &Template, arn: &str) -> BTreeSet<String> {
    t.of_kind("AWS::Events::Rule")
        .filter(|(_, r)| r.properties["Targets"].as_array().into_iter().flatten().any(|x| text(&x["Arn"]) == arn))
        .map(|(_, r)| {
            let name = text(&r.properties["Name"]);
            match r.properties["EventBusName"].as_str() {
                Some(bus) => format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{bus}/{name}"),
                None => format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{name}"),
            }
        })
        .collect()
}

#[test]
fn only_the_stacks_rules_may_send_to_the_queue_and_only_this_accounts_events_match() {
    each(|variant, t| {
        let mut wrong = Vec::new();
        let queue_arn = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:ballast-{}-events", cluster(variant));
        let rules = rules_targeting(t, &queue_arn);
        if rules.len() != 7 {
            wrong.push(format!("{} rules target the queue, want 7 (six AWS event rules, the config's)", rules.len()));
        }
        let policy_statements: Vec<Value> = t
            .of_kind("AWS::SQS::QueuePolicy")
            .filter(|(_, p)| {
                strings(&p.properties["Queues"])
                    .iter()
                    .any(|q| q.ends_with(&format!("/ballast-{}-events", cluster(variant))))
            })
            .flat_map(|(_, p)| p.properties["PolicyDocument"]["Statement"].as_array().cloned().unwrap_or_default())
            .collect();
        let source_arns = |s: &Value, op: &str| -> BTreeSet<String> {
            strings(&s["Condition"][op]["aws:SourceArn"]).into_iter().collect()
        };
        let sends = |s: &Value| strings(&s["Action"]).iter().any(|a| a == "sqs:SendMessage" || a == "sqs:*");
        for s in policy_statements.iter().filter(|s| s["Effect"] == "Allow" && sends(s)) {
            let allowed = source_arns(s, "ArnEquals");
            if allowed.is_empty() || !allowed.is_subset(&rules) {
                wrong.push(format!("an allow of sqs:SendMessage not limited to the stack's rules: {s}"));
            }
        }
        let denies: Vec<&Value> = policy_statements
            .iter()
            .filter(|s| s["Effect"] == "Deny" && sends(s) && !source_arns(s, "ArnNotEquals").is_empty())
            .collect();
        if denies.len() != 1 || source_arns(denies[0], "ArnNotEquals") != rules {
            wrong.push(format!("no deny of sqs:SendMessage for every aws:SourceArn but the {} rules", rules.len()));
        }
        for (id, rule) in t.of_kind("AWS::Events::Rule") {
            if strings(&rule.properties["EventPattern"]["account"]) != vec![ACCOUNT.to_string()] {
                wrong.push(format!("rule {id}'s pattern does not carry account [{ACCOUNT}]"));
            }
        }
        wrong
    });
}

#[test]
fn only_the_forwarders_role_may_put_events_on_its_bus() {
    each(|variant, t| {
        let mut wrong = Vec::new();
        let (_, forwarder) = t.forwarder_role();
        let bus = format!("ballast-{}", cluster(variant));
        let statements: Vec<&Value> = t
            .of_kind("AWS::Events::EventBusPolicy")
            .filter(|(_, p)| text(&p.properties["EventBusName"]) == bus)
            .map(|(_, p)| &p.properties["Statement"])
            .collect();
        let principal = |s: &Value| strings(&s["Principal"]["AWS"]);
        let allow = statements.iter().any(|s| s["Effect"] == "Allow" && principal(s) == vec![forwarder.clone()]);
        let deny = statements.iter().any(|s| {
            s["Effect"] == "Deny"
                && (s["Principal"] == "*" || principal(s) == vec!["*".to_string()])
                && strings(&s["Action"]).contains(&"events:PutEvents".to_string())
                && strings(&s["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]) == vec![forwarder.clone()]
        });
        if !(allow && deny) {
            wrong.push(format!(
                "bus {bus}: want an allow of events:PutEvents for {forwarder} and a deny for every other principal, got {statements:?}"
            ));
        }
        wrong
    });
}

#[test]
fn every_function_logs_to_its_own_group_with_retention() {
    each(|variant, t| {
        let mut wrong = Vec::new();
        for f in FUNCTIONS {
            let name = function_name(variant, f);
            let function = t.find("AWS::Lambda::Function", "FunctionName", &name).unwrap();
            let group = text(&function.properties["LoggingConfig"]["LogGroup"]);
            match t.find("AWS::Logs::LogGroup", "LogGroupName", &group) {
                Some(g) if !g.properties["RetentionInDays"].is_null() => {}
                _ => wrong.push(format!("{f}: log group `{group}` is not in the template with a retention")),
            }
        }
        wrong
    });
}

/// The functions log through the Lambda runtime's subscriber, which takes its format and
/// level from `AWS_LAMBDA_LOG_FORMAT` and `AWS_LAMBDA_LOG_LEVEL`, as `LoggingConfig` sets
/// them; a `RUST_LOG` would override the level, so neither template sets one.
#[test]
fn every_function_logs_json_at_the_level_its_logging_config_sets() {
    each(|variant, t| {
        let mut wrong = Vec::new();
        for f in FUNCTIONS {
            let name = function_name(variant, f);
            let function = t.find("AWS::Lambda::Function", "FunctionName", &name).unwrap();
            let logging = &function.properties["LoggingConfig"];
            for (key, want) in [("LogFormat", "JSON"), ("ApplicationLogLevel", "INFO"), ("SystemLogLevel", "WARN")] {
                if logging[key] != want {
                    wrong.push(format!("{f}: LoggingConfig.{key} is {}, not {want}", logging[key]));
                }
            }
            if !function.properties["Environment"]["Variables"]["RUST_LOG"].is_null() {
                wrong.push(format!("{f}: RUST_LOG is set, which overrides LoggingConfig's level"));
            }
        }
        wrong
    });
}

/// The alarm on `metric` of the queue `queue`, and what is wrong with its actions.
fn queue_alarm<'t>(t: &'t Template, metric: &str, queue: &str, wrong: &mut Vec<String>) -> Option<&'t Value> {
    let alarm = t
        .of_kind("AWS::CloudWatch::Alarm")
        .map(|(_, a)| &a.properties)
        .find(|a| a["MetricName"] == metric && a["Dimensions"][0]["Value"] == queue);
    let Some(a) = alarm else {
        wrong.push(format!("no alarm on {queue}'s {metric}"));
        return None;
    };
    let actions = strings(&a["AlarmActions"]);
    let topics: Vec<String> = t
        .of_kind("AWS::SNS::Topic")
        .map(|(_, s)| format!("arn:aws:sns:{REGION}:{ACCOUNT}:{}", text(&s.properties["TopicName"])))
        .collect();
    if actions.is_empty() || !actions.iter().all(|x| topics.contains(x)) {
        wrong
            .push(format!("the alarm on {queue}'s {metric}: actions {actions:?} are not the stack's topic {topics:?}"));
    }
    Some(a)
}

#[test]
fn events_waiting_past_any_working_deployments_wait_raise_an_alarm() {
    // The longest a working deployment keeps an event queued: a lifecycle action behind
    // the longest drain_timeout (15 min), the lease's margin and an SQS backoff.
    let longest_wait = 15 * 60 + 120 + 60;
    each(|variant, t| {
        let mut wrong = Vec::new();
        let queue = format!("ballast-{}-events", cluster(variant));
        if let Some(a) = queue_alarm(t, "ApproximateAgeOfOldestMessage", &queue, &mut wrong) {
            let threshold = a["Threshold"].as_f64().or_else(|| text(&a["Threshold"]).parse().ok()).unwrap_or(0.0);
            let period = a["Period"].as_u64().or_else(|| text(&a["Period"]).parse().ok()).unwrap_or(0);
            let evaluations = a["EvaluationPeriods"].as_u64().or_else(|| text(&a["EvaluationPeriods"]).parse().ok());
            let queue = t.find("AWS::SQS::Queue", "QueueName", &queue).unwrap();
            let n = |v: &Value| text(v).parse::<f64>().unwrap_or(0.0);
            let redriven_after =
                n(&queue.properties["VisibilityTimeout"]) * n(&queue.properties["RedrivePolicy"]["maxReceiveCount"]);
            // Before a batch that crashes every time reaches the dead-letter queue.
            if threshold >= redriven_after {
                wrong.push(format!("the age alarm ({threshold} s) fires only after a crashing batch is dead-lettered ({redriven_after} s)"));
            }
            // Not on a working deployment's waits; within half an hour of a failing one's.
            if !(f64::from(longest_wait)..=1800.0).contains(&threshold)
                || text(&a["ComparisonOperator"]) != "GreaterThanThreshold"
                || text(&a["Statistic"]) != "Maximum"
                || threshold as u64 + period * evaluations.unwrap_or(u64::MAX) > 2400
            {
                wrong.push(format!(
                    "the events queue's age alarm does not fire between {longest_wait} s and 40 min: {a}"
                ));
            }
        }
        wrong
    });
}

#[test]
fn dead_letters_raise_an_alarm_to_a_topic_and_failed_async_invocations_become_dead_letters() {
    each(|variant, t| {
        let mut wrong = Vec::new();
        let dlq_name = format!("ballast-{}-events-dlq", cluster(variant));
        let dlq_arn = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{dlq_name}");
        if let Some(a) = queue_alarm(t, "ApproximateNumberOfMessagesVisible", &dlq_name, &mut wrong) {
            // It fires on one dead letter, within one period: the depth's maximum
            // breaches the threshold, and one breaching period is enough.
            let threshold = a["Threshold"].as_f64().or_else(|| text(&a["Threshold"]).parse().ok());
            let fires_on_one = match (text(&a["ComparisonOperator"]).as_str(), threshold) {
                ("GreaterThanThreshold", Some(t)) => (0.0..1.0).contains(&t),
                ("GreaterThanOrEqualToThreshold", Some(t)) => t > 0.0 && t <= 1.0,
                _ => false,
            };
            let periods = |k: &str| a[k].as_u64().or_else(|| text(&a[k]).parse().ok());
            let one_period = periods("EvaluationPeriods") == Some(1)
                && periods("DatapointsToAlarm").is_none_or(|d| d == 1)
                && text(&a["Statistic"]) == "Maximum";
            if !fires_on_one || !one_period {
                wrong.push(format!("the dead-letter alarm does not fire on one message in one period: {a}"));
            }
        }
        let roles = t.function_roles();
        for f in ["schedule", "cluster-events"] {
            let name = function_name(variant, f);
            let config = t
                .of_kind("AWS::Lambda::EventInvokeConfig")
                .map(|(_, c)| &c.properties)
                .find(|c| text(&c["FunctionName"]) == name);
            match config.map(|c| text(&c["DestinationConfig"]["OnFailure"]["Destination"])) {
                Some(d) if d == dlq_arn => {}
                other => wrong.push(format!("{f}: on-failure destination {other:?}, want {dlq_arn}")),
            }
            let can_send = statements(t, &roles[&name])
                .iter()
                .any(|(_, s)| allows(s, "sqs:SendMessage") && strings(&s["Resource"]).contains(&dlq_arn));
            if !can_send {
                wrong.push(format!("{f}: its role may not send its failures to {dlq_arn}"));
            }
        }
        wrong
    });
}

#[test]
fn the_dashboard_shows_what_operators_need_from_metrics_the_functions_emit() {
    each(|variant, t| {
        let mut wrong = Vec::new();
        let Some(dashboard) =
            t.find("AWS::CloudWatch::Dashboard", "DashboardName", &format!("ballast-{}", cluster(variant)))
        else {
            return vec!["no dashboard".into()];
        };
        let body: Value = serde_json::from_str(&text(&dashboard.properties["DashboardBody"])).expect("dashboard JSON");
        let widgets = body["widgets"].as_array().cloned().unwrap_or_default();
        let mut named = BTreeSet::new();
        for w in &widgets {
            let metrics = w["properties"]["metrics"].to_string();
            // Names in SEARCH('{Ballast,...} MetricName=...') expressions, quoted.
            for part in metrics.split("Ballast,").skip(1) {
                for name in part.split("\\\"").skip(1).step_by(2) {
                    named.insert(name.to_string());
                }
            }
        }
        for name in &named {
            if !DECISION_METRICS.contains(&name.as_str()) && !OTHER_METRICS.contains(&name.as_str()) {
                wrong.push(format!("the dashboard names `{name}`, which no function emits"));
            }
        }
        for needed in ["FallbackUnits", "HeadroomReplicas", "ApiErrors", "ReconcileDuration", "SurplusNamed"]
            .iter()
            .chain(DECISION_METRICS.iter())
        {
            if !named.contains(*needed) {
                wrong.push(format!("the dashboard lacks `{needed}`"));
            }
        }
        let dlq = format!("ballast-{}-events-dlq", cluster(variant));
        if !body.to_string().contains(&format!("\"QueueName\",\"{dlq}\"")) {
            wrong.push("the dashboard lacks the dead-letter queue's depth".into());
        }
        wrong
    });
}

#[test]
fn asg_changes_need_both_the_pool_and_this_clusters_tag() {
    each(|variant, t| {
        let mut wrong = Vec::new();
        let roles = t.function_roles();
        for f in FUNCTIONS {
            for (policy, s) in statements(t, &roles[&function_name(variant, f)]) {
                let mutating = strings(&s["Action"])
                    .iter()
                    .any(|a| a.starts_with("autoscaling:") && !a.starts_with("autoscaling:Describe"));
                if s["Effect"] != "Allow" || !mutating {
                    continue;
                }
                let c = &s["Condition"];
                let cluster_ok = text(&c["StringEquals"]["aws:ResourceTag/ballast.io/cluster"]) == cluster(variant);
                let pool_ok = text(&c["Null"]["aws:ResourceTag/ballast.io/pool"]) == "false";
                if !(cluster_ok && pool_ok) {
                    wrong.push(format!("{f} ({policy}): Auto Scaling changes not conditioned on both tags: {c}"));
                }
            }
        }
        wrong
    });
}

#[test]
fn every_function_outlasts_the_longest_drain_of_the_example_config() {
    let needed = ballast_tests::example_config().min_function_timeout().as_secs();
    each(|variant, t| {
        FUNCTIONS
            .iter()
            .filter_map(|f| {
                let function = t.find("AWS::Lambda::Function", "FunctionName", &function_name(variant, f)).unwrap();
                let timeout = text(&function.properties["Timeout"]).parse::<u64>().unwrap_or(3);
                (timeout < needed)
                    .then(|| format!("{f}: timeout {timeout} s < the longest drain_timeout plus 120 s ({needed} s)"))
            })
            .collect()
    });
}

#[test]
fn the_forwarder_image_builds_from_bases_pinned_by_digest_and_the_locked_dependencies() {
    let dockerfile =
        std::fs::read_to_string(ballast_tests::repo_root().join("functions/forwarder/Dockerfile")).unwrap();
    let froms: Vec<&str> = dockerfile.lines().filter(|l| l.trim_start().starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage: {froms:?}");
    for from in froms {
        let image = from.split_whitespace().nth(1).unwrap_or_default();
        let digest = image.split_once("@sha256:").map(|(_, d)| d).unwrap_or_default();
        assert!(digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()), "not pinned by digest: {from}");
    }
    assert!(dockerfile.contains("cargo build --release --locked"), "the build must use Cargo.lock as is");
    let ignore = std::fs::read_to_string(ballast_tests::repo_root().join(".dockerignore")).unwrap();
    assert!(
        ignore.lines().any(|l| l.trim().trim_end_matches('/') == "target"),
        "the build context leaves target out: {ignore}"
    );
}

/// The config parameter's name as a deployment of `variant` gets it by default.
fn config_name(variant: Variant) -> String {
    format!("/ballast/{}/config", cluster(variant))
}

/// What is wrong with how the template names and follows the config parameter `name`.
fn config_wiring(variant: Variant, t: &Template, name: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    // Written by `ballast config push`: a stack that wrote it would overwrite it on each update.
    for (id, _) in t.of_kind("AWS::SSM::Parameter") {
        wrong.push(format!("the stack creates the SSM parameter {id}"));
    }
    let arn = format!("arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{name}");
    let roles = t.function_roles();
    let (forwarder, _) = t.forwarder_role();
    for (who, role) in FUNCTIONS
        .iter()
        .map(|f| (f.to_string(), roles[&function_name(variant, f)].clone()))
        .chain(std::iter::once(("forwarder".to_string(), forwarder)))
    {
        if who != "forwarder" {
            let function = t.find("AWS::Lambda::Function", "FunctionName", &function_name(variant, &who)).unwrap();
            let told = text(&function.properties["Environment"]["Variables"]["BALLAST_CONFIG_PARAMETER"]);
            if told != name {
                wrong.push(format!("{who}: BALLAST_CONFIG_PARAMETER is `{told}`, want `{name}`"));
            }
        }
        let reads: Vec<Vec<String>> = statements(t, &role)
            .iter()
            .filter(|(_, s)| allows(s, "ssm:GetParameter"))
            .map(|(_, s)| strings(&s["Resource"]))
            .collect();
        if reads != vec![vec![arn.clone()]] {
            wrong.push(format!("{who}: ssm:GetParameter on {reads:?}, want exactly [{arn}]"));
        }
    }
    // Its change event reaches every function: two directly (with their permission), the
    // interruption function through its queue.
    let rules: Vec<(&String, &ballast_tests::templates::Resource)> = t
        .of_kind("AWS::Events::Rule")
        .filter(|(_, r)| r.properties["EventPattern"]["source"] == serde_json::json!(["aws.ssm"]))
        .collect();
    let [(_, rule)] = rules.as_slice() else {
        wrong.push(format!("{} rules on aws.ssm, want one", rules.len()));
        return wrong;
    };
    let rule_name = text(&rule.properties["Name"]);
    if rule_name != format!("ballast-{}-config-changed", cluster(variant)) || !rule.properties["EventBusName"].is_null()
    {
        wrong.push(format!(
            "the config rule is {rule_name} on {}, want ballast-CLUSTER-config-changed on the default bus",
            rule.properties["EventBusName"]
        ));
    }
    let pattern = &rule.properties["EventPattern"];
    let want = serde_json::json!({
        "account": [ACCOUNT], "source": ["aws.ssm"], "detail-type": ["Parameter Store Change"],
        "detail": { "name": [name], "operation": ["Create", "Update"] },
    });
    if *pattern != want {
        wrong.push(format!("the config rule's pattern is {pattern}, want {want}"));
    }
    let rule_arn = format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule_name}");
    let targets: BTreeSet<String> =
        rule.properties["Targets"].as_array().into_iter().flatten().map(|x| text(&x["Arn"])).collect();
    let function_arn = |f: &str| format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{}", function_name(variant, f));
    let queue = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:ballast-{}-events", cluster(variant));
    let want: BTreeSet<String> = [function_arn("schedule"), function_arn("cluster-events"), queue].into();
    if targets != want {
        wrong.push(format!("the config rule targets {targets:?}, want {want:?}"));
    }
    for f in ["schedule", "cluster-events"] {
        let permitted = t.of_kind("AWS::Lambda::Permission").any(|(_, p)| {
            let target = text(&p.properties["FunctionName"]);
            (target == function_name(variant, f) || target == function_arn(f))
                && p.properties["Principal"] == "events.amazonaws.com"
                && text(&p.properties["SourceArn"]) == rule_arn
        });
        if !permitted {
            wrong.push(format!("{f}: no permission for the config rule to invoke it"));
        }
    }
    wrong
}

#[test]
fn the_stack_names_the_config_parameter_and_every_function_follows_its_changes() {
    each(|variant, t| config_wiring(variant, t, &config_name(variant)));
}

#[test]
fn a_config_parameter_of_another_name_is_read_and_followed_under_that_name() {
    use ballast_tests::templates::{sam_parameters, sam_translated};
    let Some(raw) = sam_translated() else { return };
    assert!(raw["Parameters"].get("BallastConfig").is_none(), "the config is no CloudFormation parameter");
    let pattern = text(&raw["Parameters"]["ConfigParameterName"]["AllowedPattern"]);
    assert!(pattern.starts_with("^(/"), "a name must start with /: {pattern}");
    let mut parameters = sam_parameters(false);
    parameters.insert("ConfigParameterName", Value::from("/platform/ballast.yaml"));
    let t = Template::render(&raw, &parameters);
    let wrong = config_wiring(Variant::Sam, &t, "/platform/ballast.yaml");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The EKS side of the stack: an access entry per function role (the group
/// infra/k8s/functions-rbac.yaml binds) and the forwarder's Pod Identity association.
fn eks_access(variant: Variant, t: &Template, entries: bool) -> Vec<String> {
    let mut wrong = Vec::new();
    let roles = t.function_roles();
    let mut want: BTreeSet<String> = BTreeSet::new();
    if entries {
        want = FUNCTIONS
            .iter()
            .map(|f| format!("arn:aws:iam::{ACCOUNT}:role/{}", roles[&function_name(variant, f)]))
            .collect();
    }
    let mut got = BTreeSet::new();
    for (id, e) in t.of_kind("AWS::EKS::AccessEntry") {
        let p = &e.properties;
        got.insert(text(&p["PrincipalArn"]));
        if text(&p["ClusterName"]) != cluster(variant)
            || strings(&p["KubernetesGroups"]) != vec!["ballast:functions".to_string()]
            || text(&p["Type"]) != "STANDARD"
        {
            wrong.push(format!("access entry {id}: {p}"));
        }
    }
    if got != want {
        wrong.push(format!("access entries for {got:?}, want {want:?}"));
    }
    let (_, forwarder) = t.forwarder_role();
    let associations: Vec<&Value> = t.of_kind("AWS::EKS::PodIdentityAssociation").map(|(_, a)| &a.properties).collect();
    let ok = |a: &&Value| {
        text(&a["ClusterName"]) == cluster(variant)
            && a["Namespace"] == "ballast"
            && a["ServiceAccount"] == "ballast-forwarder"
            && text(&a["RoleArn"]) == forwarder
    };
    if associations.len() != 1 || !associations.iter().all(ok) {
        wrong.push(format!(
            "Pod Identity associations {associations:?}, want ballast/ballast-forwarder with {forwarder}"
        ));
    }
    wrong
}

#[test]
fn the_function_roles_get_access_entries_and_the_forwarder_its_pod_identity() {
    each(|variant, t| eks_access(variant, t, true));
}

#[test]
fn a_cluster_on_config_map_authentication_gets_no_access_entries() {
    use ballast_tests::templates::{sam_parameters, sam_translated};
    let Some(raw) = sam_translated() else { return };
    let mut parameters = sam_parameters(false);
    parameters.insert("ClusterAccessEntries", Value::from("false"));
    let wrong = eks_access(Variant::Sam, &Template::render(&raw, &parameters), false);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn a_silent_forwarder_raises_an_alarm_within_fifteen_minutes() {
    // Its heartbeat (infra/k8s BALLAST_HEARTBEAT) sends every pool's demand every 5 min.
    each(|variant, t| {
        let mut wrong = Vec::new();
        let bus = format!("ballast-{}", cluster(variant));
        let rule = format!("ballast-{}-forwarder", cluster(variant));
        let on_bus =
            t.find("AWS::Events::Rule", "Name", &rule).is_some_and(|r| text(&r.properties["EventBusName"]) == bus);
        if !on_bus {
            wrong.push(format!("no rule {rule} on the bus {bus}"));
        }
        let alarm =
            t.of_kind("AWS::CloudWatch::Alarm").map(|(_, a)| &a.properties).find(|a| a["Namespace"] == "AWS/Events");
        let Some(a) = alarm else { return vec!["no alarm on the forwarder's events".into()] };
        let dims: BTreeSet<(String, String)> =
            a["Dimensions"].as_array().into_iter().flatten().map(|d| (text(&d["Name"]), text(&d["Value"]))).collect();
        let want: BTreeSet<(String, String)> = [("EventBusName".into(), bus), ("RuleName".into(), rule)].into();
        let n = |k: &str| text(&a[k]).parse::<f64>().unwrap_or(-1.0);
        let window = n("Period") * n("EvaluationPeriods");
        if dims != want
            || a["MetricName"] != "TriggeredRules"
            || text(&a["ComparisonOperator"]) != "LessThanThreshold"
            || n("Threshold") != 1.0
            || text(&a["TreatMissingData"]) != "breaching"
            || !(600.0..=900.0).contains(&window)
            || n("DatapointsToAlarm") != n("EvaluationPeriods")
            || strings(&a["AlarmActions"]).is_empty()
        {
            wrong.push(format!("the forwarder's alarm does not fire after 15 minutes without its events: {a}"));
        }
        wrong
    });
}

/// The capabilities CloudFormation requires of a template's resources, each with why.
fn required_capabilities(raw: &Value) -> BTreeSet<(String, String)> {
    let iam = [
        ("AWS::IAM::Role", Some("RoleName")),
        ("AWS::IAM::ManagedPolicy", Some("ManagedPolicyName")),
        ("AWS::IAM::User", Some("UserName")),
        ("AWS::IAM::Group", Some("GroupName")),
        ("AWS::IAM::InstanceProfile", Some("InstanceProfileName")),
        ("AWS::IAM::Policy", None),
        ("AWS::IAM::AccessKey", None),
        ("AWS::IAM::UserToGroupAddition", None),
    ];
    let mut needed = BTreeSet::new();
    for (id, r) in raw["Resources"].as_object().into_iter().flatten() {
        let kind = r["Type"].as_str().unwrap_or_default();
        if let Some((_, name)) = iam.iter().find(|(k, _)| *k == kind) {
            let named = name.is_some_and(|n| !r["Properties"][n].is_null());
            let capability = if named { "CAPABILITY_NAMED_IAM" } else { "CAPABILITY_IAM" };
            needed.insert((capability.to_string(), format!("{id} ({kind})")));
        }
        if kind == "AWS::CloudFormation::Stack" || kind == "AWS::Serverless::Application" {
            needed.insert(("CAPABILITY_AUTO_EXPAND".to_string(), format!("{id} ({kind})")));
        }
    }
    needed
}

/// What `capabilities` does not cover of `needed` (CAPABILITY_NAMED_IAM implies CAPABILITY_IAM).
fn uncovered(needed: &BTreeSet<(String, String)>, capabilities: &BTreeSet<String>) -> Vec<String> {
    needed
        .iter()
        .filter(|(c, _)| {
            !(capabilities.contains(c) || (c == "CAPABILITY_IAM" && capabilities.contains("CAPABILITY_NAMED_IAM")))
        })
        .map(|(c, why)| format!("{why} needs {c}"))
        .collect()
}

#[test]
fn the_shipped_samconfig_passes_every_capability_the_stack_needs() {
    use ballast_tests::templates::{infra_python, sam_translated};
    let Some(translated) = sam_translated() else { return };
    let python = infra_python().expect("the SAM CLI's venv");
    // The capabilities as the SAM CLI itself reads them from the shipped file.
    let script = "import sys\nfrom samcli.lib.config.samconfig import SamConfig\n\
        c = SamConfig(sys.argv[1], 'samconfig.toml').get_all(['deploy'], 'parameters')\n\
        print(c.get('capabilities', ''))";
    let dir = ballast_tests::repo_root().join("infra/sam");
    let out = std::process::Command::new(python).arg("-c").arg(script).arg(&dir).output().expect("python runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let capabilities: BTreeSet<String> =
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect();
    let needed = required_capabilities(&translated);
    assert!(needed.iter().any(|(c, _)| c == "CAPABILITY_NAMED_IAM"), "the roles have fixed names: {needed:?}");
    // `sam deploy --guided`'s default would be refused.
    assert!(!uncovered(&needed, &BTreeSet::from(["CAPABILITY_IAM".to_string()])).is_empty());
    let wrong = uncovered(&needed, &capabilities);
    assert!(wrong.is_empty(), "infra/sam/samconfig.toml passes {capabilities:?}: {wrong:#?}");
}
