//! What IAM would see of each AWS call a test made through moto, and what it would
//! decide: moto's request log turned into (caller, action, resource ARN, request context),
//! then evaluated offline against a role's policies by @cloud-copilot/iam-simulate
//! (infra/iam/simulate.mjs).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use base64::Engine;
use serde::Serialize;
use serde_json::{json, Value};

use crate::moto::required;
use crate::templates::{rendered, strings, text, Template, Variant, ACCOUNT, REGION};

/// One call as IAM authorizes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    /// The access key that signed it: who called (each test caller has its own).
    pub caller: String,
    /// `service:Operation`, e.g. `autoscaling:SetDesiredCapacity`.
    pub action: String,
    /// The resource ARN IAM checks, `*` where the API has no resource-level permission.
    pub resource: String,
    /// Condition keys IAM would know: the resource's tags, region, transport.
    pub context: BTreeMap<String, Value>,
}

/// What the calls need resolved that the request does not say: each ASG's ARN and tags,
/// which ASG each instance was in.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pub asgs: BTreeMap<String, (String, BTreeMap<String, String>)>,
    pub instance_asg: BTreeMap<String, String>,
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form(body: &str) -> BTreeMap<String, String> {
    body.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
}

fn header<'a>(request: &'a Value, name: &str) -> Option<&'a str> {
    request["headers"].as_object()?.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).and_then(|(_, v)| v.as_str())
}

fn body(request: &Value) -> String {
    let text = request["body"].as_str().unwrap_or_default();
    if request["body_encoded"] == true {
        let bytes = base64::engine::general_purpose::STANDARD.decode(text).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        text.to_string()
    }
}

fn queue_arn(url: &str) -> String {
    let name = url.rsplit('/').next().unwrap_or_default();
    format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")
}

/// Who signed a logged request (its access key).
pub fn caller(request: &Value) -> Option<String> {
    let auth = header(request, "Authorization")?;
    let credential = auth.split("Credential=").nth(1)?;
    credential.split('/').next().map(str::to_string)
}

impl Inventory {
    /// Adds what the deployment's ASGs are now: ARNs, tags, which instance is where (run
    /// it before and after steps that replace instances).
    pub async fn snapshot(&mut self, d: &crate::aws::Deployment) {
        let out = d.autoscaling.describe_auto_scaling_groups().send().await.expect("describe");
        for g in out.auto_scaling_groups() {
            let name = g.auto_scaling_group_name().unwrap_or_default().to_string();
            let tags = g.tags().iter().filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string()))).collect();
            self.asgs.insert(name.clone(), (g.auto_scaling_group_arn().unwrap_or_default().to_string(), tags));
            for i in g.instances() {
                self.instance_asg.insert(i.instance_id().unwrap_or_default().to_string(), name.clone());
            }
        }
    }

    fn asg(&self, name: &str) -> (String, BTreeMap<String, Value>) {
        let (arn, tags) = self.asgs.get(name).unwrap_or_else(|| panic!("ASG {name} is not in the inventory"));
        let mut context = BTreeMap::new();
        for (k, v) in tags {
            context.insert(format!("aws:ResourceTag/{k}"), Value::from(v.clone()));
            context.insert(format!("autoscaling:ResourceTag/{k}"), Value::from(v.clone()));
        }
        (arn.clone(), context)
    }

    /// The calls of one logged request (PutEvents: one per bus named).
    pub fn calls(&self, request: &Value) -> Vec<Call> {
        let auth = header(request, "Authorization").unwrap_or_default();
        let Some(credential) = auth.split("Credential=").nth(1) else { return Vec::new() };
        let parts: Vec<&str> = credential.split(',').next().unwrap_or_default().split('/').collect();
        let (caller, service) = (parts[0].to_string(), parts.get(3).copied().unwrap_or_default());
        let text = body(request);
        let target = header(request, "X-Amz-Target").unwrap_or_default();
        let operation = target.rsplit('.').next().unwrap_or_default().to_string();
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let mut context = BTreeMap::from([
            ("aws:RequestedRegion".to_string(), Value::from(REGION)),
            ("aws:SecureTransport".to_string(), Value::from("true")),
        ]);
        let one = |action: String,
                   resource: String,
                   extra: BTreeMap<String, Value>,
                   context: &mut BTreeMap<String, Value>| {
            context.extend(extra);
            vec![Call { caller: caller.clone(), action, resource, context: context.clone() }]
        };
        match service {
            "autoscaling" | "ec2" => {
                let params = form(&text);
                let op = params.get("Action").cloned().unwrap_or_default();
                let action = format!("{service}:{op}");
                let asg = match op.as_str() {
                    "SetDesiredCapacity" | "CompleteLifecycleAction" | "RecordLifecycleActionHeartbeat" => {
                        params.get("AutoScalingGroupName").cloned()
                    }
                    "TerminateInstanceInAutoScalingGroup" => {
                        let id = params.get("InstanceId").cloned().unwrap_or_default();
                        Some(
                            self.instance_asg.get(&id).cloned().unwrap_or_else(|| panic!("instance {id}: ASG unknown")),
                        )
                    }
                    _ => None,
                };
                match asg {
                    Some(name) => {
                        let (arn, tags) = self.asg(&name);
                        one(action, arn, tags, &mut context)
                    }
                    None => one(action, "*".into(), BTreeMap::new(), &mut context),
                }
            }
            "dynamodb" => {
                let tables: Vec<String> = match json.get("TableName").and_then(Value::as_str) {
                    Some(t) => vec![t.to_string()],
                    None => json["RequestItems"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default(),
                };
                tables
                    .into_iter()
                    .flat_map(|t| {
                        let mut c = context.clone();
                        one(
                            format!("dynamodb:{operation}"),
                            format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{t}"),
                            BTreeMap::new(),
                            &mut c,
                        )
                    })
                    .collect()
            }
            "sqs" => {
                let url = json["QueueUrl"].as_str().unwrap_or_default();
                one(format!("sqs:{operation}"), queue_arn(url), BTreeMap::new(), &mut context)
            }
            "ssm" => {
                let name = json["Name"].as_str().unwrap_or_default();
                let name = name.strip_prefix('/').unwrap_or(name);
                one(
                    format!("ssm:{operation}"),
                    format!("arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/{name}"),
                    BTreeMap::new(),
                    &mut context,
                )
            }
            "eks" => {
                let url = request["url"].as_str().unwrap_or_default();
                let path = url.splitn(4, '/').nth(3).unwrap_or_default();
                match (request["method"].as_str(), path.split('/').collect::<Vec<_>>().as_slice()) {
                    (Some("GET"), ["clusters", name]) => one(
                        "eks:DescribeCluster".into(),
                        format!("arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{name}"),
                        BTreeMap::new(),
                        &mut context,
                    ),
                    other => panic!("an EKS request the IAM test does not model: {other:?}"),
                }
            }
            "events" => {
                let mut buses: Vec<String> = json["Entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| e["EventBusName"].as_str().unwrap_or("default").to_string())
                    .collect();
                buses.sort();
                buses.dedup();
                buses
                    .into_iter()
                    .flat_map(|b| {
                        let arn = if b.starts_with("arn:") {
                            b
                        } else {
                            format!("arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{b}")
                        };
                        let mut c = context.clone();
                        one(format!("events:{operation}"), arn, BTreeMap::new(), &mut c)
                    })
                    .collect()
            }
            other => panic!("a call to {other} the IAM test does not model: {request}"),
        }
    }
}

/// One request to evaluate.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub id: String,
    pub principal: String,
    pub action: String,
    pub resource: String,
    pub context: BTreeMap<String, Value>,
    #[serde(rename = "identityPolicies")]
    pub identity_policies: Vec<Value>,
    #[serde(rename = "resourcePolicy", skip_serializing_if = "Option::is_none")]
    pub resource_policy: Option<Value>,
}

impl Case {
    pub fn new(id: impl Into<String>, principal: &str, policies: &[(String, Value)], call: &Call) -> Case {
        let mut context = call.context.clone();
        context.insert("aws:PrincipalArn".into(), Value::from(principal));
        context.insert("aws:PrincipalAccount".into(), Value::from(ACCOUNT));
        Case {
            id: id.into(),
            principal: principal.to_string(),
            action: call.action.clone(),
            resource: call.resource.clone(),
            context,
            identity_policies: policies.iter().map(|(name, doc)| json!({ "name": name, "policy": doc })).collect(),
            resource_policy: None,
        }
    }
}

fn simulator() -> Option<(PathBuf, PathBuf)> {
    let dir = crate::repo_root().join("infra/iam");
    let node = crate::on_path("node")?;
    dir.join("node_modules/@cloud-copilot/iam-simulate").exists().then(|| (node, dir.join("simulate.mjs")))
}

/// Each case's result: `Allowed`, `ExplicitlyDenied`, `ImplicitlyDenied` (or `Error`
/// with the simulator's reasons). `None` (the test skips) only outside CI.
pub fn evaluate(cases: &[Case]) -> Option<BTreeMap<String, (String, Value)>> {
    let Some((node, script)) = simulator() else {
        assert!(!required(), "CI=true but the IAM simulator is missing: run scripts/test (npm ci in infra/iam)");
        eprintln!("skipped: infra/iam not installed (scripts/test runs npm ci there)");
        return None;
    };
    let mut child = Command::new(node)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs");
    let input = serde_json::to_vec(cases).expect("cases as JSON");
    child.stdin.take().expect("stdin").write_all(&input).expect("write cases");
    let out = child.wait_with_output().expect("simulator output");
    assert!(out.status.success(), "simulator failed: {}", String::from_utf8_lossy(&out.stderr));
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).expect("simulator JSON");
    Some(
        results
            .into_iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap_or_default().to_string(),
                    (r["result"].as_str().unwrap_or_default().to_string(), r["errors"].clone()),
                )
            })
            .collect(),
    )
}

/// The templates the calls are judged against: the SAM template with and without a VPC, the
/// CDK app in VPC mode (rendered with the moto deployment's names).
pub const VARIANTS: [Variant; 3] = [Variant::Sam, Variant::SamVpc, Variant::CdkVpc];

/// The role (name, ARN) a caller runs as in a template: a function's (`interruption`,
/// `schedule`, `cluster-events`) or the forwarder's.
pub fn role_of(t: &Template, caller: &str) -> (String, String) {
    if caller == "forwarder" {
        return t.forwarder_role();
    }
    let role = t.function_roles()[&format!("ballast-{}-{caller}", crate::aws::CLUSTER)].clone();
    let arn = format!("arn:aws:iam::{ACCOUNT}:role/{role}");
    (role, arn)
}

/// The resource policy IAM also reads for a call: the bus's or the queue's.
pub fn resource_policy(t: &Template, call: &Call) -> Option<Value> {
    let statements: Vec<Value> = if call.action.starts_with("events:") {
        let bus = call.resource.rsplit('/').next().unwrap_or_default();
        t.of_kind("AWS::Events::EventBusPolicy")
            .filter(|(_, p)| text(&p.properties["EventBusName"]) == bus)
            .map(|(_, p)| p.properties["Statement"].clone())
            .collect()
    } else if call.action.starts_with("sqs:") {
        let queue = call.resource.rsplit(':').next().unwrap_or_default();
        t.of_kind("AWS::SQS::QueuePolicy")
            .filter(|(_, p)| strings(&p.properties["Queues"]).iter().any(|u| u.ends_with(&format!("/{queue}"))))
            .flat_map(|(_, p)| p.properties["PolicyDocument"]["Statement"].as_array().cloned().unwrap_or_default())
            .collect()
    } else {
        Vec::new()
    };
    (!statements.is_empty()).then(|| json!({ "Version": "2012-10-17", "Statement": statements }))
}

/// Each call the role of its caller (`role`) would refuse in any of [`VARIANTS`], described;
/// `None` (the test skips) only outside CI when a template or the evaluator is missing.
pub fn refused(calls: &[Call], role: fn(&Template, &str) -> (String, String)) -> Option<Vec<String>> {
    let mut cases = Vec::new();
    let mut described = BTreeMap::new();
    for v in VARIANTS {
        let t = rendered(v)?;
        for (i, call) in calls.iter().enumerate() {
            let (name, arn) = role(&t, &call.caller);
            let mut case = Case::new(format!("{}#{i}", v.name()), &arn, &t.role_policies(&name), call);
            case.resource_policy = resource_policy(&t, call);
            described.insert(
                case.id.clone(),
                format!("{} {} on {} ({:?})", call.caller, call.action, call.resource, call.context),
            );
            cases.push(case);
        }
    }
    let results = evaluate(&cases)?;
    Some(
        results
            .iter()
            .filter(|(_, (r, _))| r != "Allowed")
            .map(|(id, (r, e))| format!("{id} {r}: {} {e}", described[id]))
            .collect(),
    )
}
