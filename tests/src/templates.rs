//! The deployment templates as plain data: the SAM template translated to CloudFormation
//! by `aws-sam-translator` (infra/sam/translate.py, the transform `sam validate` runs) and
//! the CDK app's synthesized templates (infra/cdk/cdk.out*, made by scripts/test), then
//! rendered for given parameters: conditions decided, intrinsics (Ref, GetAtt, Sub, Join,
//! Split, Select, If) resolved to the names and ARNs CloudFormation would give.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{Map, Value};

use crate::moto::required;

pub const ACCOUNT: &str = "123456789012";
pub const REGION: &str = "eu-west-1";

/// Which template and how it is deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Sam,
    SamVpc,
    Cdk,
    CdkVpc,
}

impl Variant {
    pub const ALL: [Variant; 4] = [Variant::Sam, Variant::SamVpc, Variant::Cdk, Variant::CdkVpc];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Sam => "SAM",
            Variant::SamVpc => "SAM (VPC)",
            Variant::Cdk => "CDK",
            Variant::CdkVpc => "CDK (VPC)",
        }
    }
}

/// The parameters a deployment of the test's names uses (the moto deployment's: cluster
/// `test`, table `ballast-test-state`).
pub fn sam_parameters(vpc: bool) -> BTreeMap<&'static str, Value> {
    let mut p = BTreeMap::from([
        ("ClusterName", Value::from(crate::aws::CLUSTER)),
        ("StateTableName", Value::from(crate::aws::TABLE)),
    ]);
    if vpc {
        p.insert("VpcId", Value::from(VPC));
        p.insert("SubnetIds", Value::from(SUBNETS.join(",")));
        p.insert("SecurityGroupIds", Value::from(SECURITY_GROUPS.join(",")));
        p.insert("CreateVpcEndpoints", Value::from("true"));
        p.insert("VpcEndpointRouteTableIds", Value::from(ROUTE_TABLES.join(",")));
    }
    p
}

/// The VPC mode's network, as scripts/test passes it to `cdk synth`.
pub const VPC: &str = "vpc-0123456789abcdef0";
pub const SUBNETS: [&str; 2] = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"];
pub const SECURITY_GROUPS: [&str; 1] = ["sg-0123456789abcdef0"];
/// The subnets' route tables, for the DynamoDB gateway endpoint the VPC mode creates.
pub const ROUTE_TABLES: [&str; 1] = ["rtb-0123456789abcdef0"];

/// The Python of the SAM CLI's venv (aws-sam-translator, the SAM CLI's own modules).
pub fn infra_python() -> Option<PathBuf> {
    python()
}

fn python() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("BALLAST_INFRA_PYTHON") {
        return Some(PathBuf::from(path));
    }
    crate::cache_dir().map(|c| c.join("venv-infra/bin/python")).filter(|p| p.exists())
}

/// The SAM template as CloudFormation (`None`, the test skips, only outside CI); translated
/// once per test binary.
pub fn sam_translated() -> Option<Value> {
    static TRANSLATED: std::sync::OnceLock<Option<Value>> = std::sync::OnceLock::new();
    TRANSLATED.get_or_init(translate_sam).clone()
}

fn translate_sam() -> Option<Value> {
    sam_translated_file(&crate::repo_root().join("infra/sam/template.yaml"))
}

/// A SAM template file as CloudFormation (`None`, the test skips, only outside CI).
pub fn sam_translated_file(template: &std::path::Path) -> Option<Value> {
    let Some(python) = python() else {
        assert!(!required(), "CI=true but aws-sam-translator's venv is missing: run scripts/test");
        eprintln!("skipped: aws-sam-translator not installed (scripts/test installs it)");
        return None;
    };
    let root = crate::repo_root();
    let out = Command::new(&python)
        .arg(root.join("infra/sam/translate.py"))
        .arg(template)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(out.status.success(), "aws-sam-translator failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).expect("translated template is JSON"))
}

/// A synthesized CDK template (`None`, the test skips, only outside CI).
pub fn cdk_synthesized(vpc: bool) -> Option<Value> {
    let path = if vpc {
        crate::repo_root().join("infra/cdk/cdk.out-vpc/ballast-test.template.json")
    } else {
        crate::repo_root().join("infra/cdk/cdk.out/ballast-prod-eks.template.json")
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(serde_json::from_str(&text).expect("template JSON")),
        Err(_) => {
            assert!(!required(), "CI=true but {} is missing: scripts/test synthesizes it", path.display());
            eprintln!("skipped: {} not synthesized (scripts/test runs cdk synth)", path.display());
            None
        }
    }
}

/// A template of `variant`, rendered. `None` (skip) only outside CI.
pub fn rendered(variant: Variant) -> Option<Template> {
    Some(match variant {
        Variant::Sam => Template::render(&sam_translated()?, &sam_parameters(false)),
        Variant::SamVpc => Template::render(&sam_translated()?, &sam_parameters(true)),
        Variant::Cdk => Template::render(&cdk_synthesized(false)?, &BTreeMap::new()),
        Variant::CdkVpc => Template::render(&cdk_synthesized(true)?, &BTreeMap::new()),
    })
}

/// A rendered template: its resources and outputs (those whose condition holds) with every
/// intrinsic resolved.
#[derive(Debug, Clone)]
pub struct Template {
    pub resources: BTreeMap<String, Resource>,
    /// Each output's value.
    pub outputs: BTreeMap<String, Value>,
}

#[derive(Debug, Clone)]
pub struct Resource {
    pub kind: String,
    pub properties: Value,
}

struct Renderer<'a> {
    raw: &'a Map<String, Value>,
    mappings: Map<String, Value>,
    parameters: BTreeMap<String, Value>,
    conditions: BTreeMap<String, bool>,
}

const NO_VALUE: &str = "\u{0}NoValue";

impl Template {
    pub fn render(template: &Value, overrides: &BTreeMap<&str, Value>) -> Template {
        let raw = template["Resources"].as_object().expect("Resources");
        let mut parameters = BTreeMap::new();
        for (name, p) in template["Parameters"].as_object().into_iter().flatten() {
            let value = overrides.get(name.as_str()).cloned().or_else(|| p.get("Default").cloned());
            let value = value.unwrap_or(Value::from(""));
            let value = match (p["Type"].as_str(), value) {
                (Some("CommaDelimitedList"), Value::String(s)) => {
                    Value::Array(s.split(',').map(|x| Value::from(x.trim())).collect())
                }
                (_, Value::Number(n)) => Value::String(n.to_string()),
                (_, v) => v,
            };
            parameters.insert(name.clone(), value);
        }
        let mappings = template["Mappings"].as_object().cloned().unwrap_or_default();
        let mut renderer = Renderer { raw, mappings, parameters, conditions: BTreeMap::new() };
        // Conditions may refer to each other: decide until nothing changes.
        let conditions = template["Conditions"].as_object().cloned().unwrap_or_default();
        for _ in 0..conditions.len() + 1 {
            for (name, expr) in &conditions {
                if let Some(b) = renderer.condition(expr) {
                    renderer.conditions.insert(name.clone(), b);
                }
            }
        }
        let mut resources = BTreeMap::new();
        for (id, r) in raw {
            if let Some(c) = r.get("Condition").and_then(Value::as_str) {
                if !renderer.conditions.get(c).copied().unwrap_or_else(|| panic!("condition {c} undecided")) {
                    continue;
                }
            }
            let properties = renderer.resolve(r.get("Properties").unwrap_or(&Value::Null));
            resources.insert(id.clone(), Resource { kind: r["Type"].as_str().unwrap_or_default().into(), properties });
        }
        let mut outputs = BTreeMap::new();
        for (name, o) in template["Outputs"].as_object().into_iter().flatten() {
            if let Some(c) = o.get("Condition").and_then(Value::as_str) {
                if !renderer.conditions.get(c).copied().unwrap_or_else(|| panic!("condition {c} undecided")) {
                    continue;
                }
            }
            outputs.insert(name.clone(), renderer.resolve(&o["Value"]));
        }
        Template { resources, outputs }
    }

    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (&'a String, &'a Resource)> + 'a {
        self.resources.iter().filter(move |(_, r)| r.kind == kind)
    }

    /// The one resource of `kind` whose property `key` is `value`.
    pub fn find(&self, kind: &str, key: &str, value: &str) -> Option<&Resource> {
        self.resources.values().find(|r| r.kind == kind && r.properties[key] == value)
    }

    /// Every policy document attached to the role named `role_name`: inline, managed
    /// policies of this template, and AWS::IAM::Policy resources naming the role.
    pub fn role_policies(&self, role_name: &str) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        let (role_id, role) = self
            .of_kind("AWS::IAM::Role")
            .find(|(id, r)| role_name_of(id, r) == role_name)
            .unwrap_or_else(|| panic!("no role {role_name}"));
        for p in role.properties["Policies"].as_array().into_iter().flatten() {
            out.push((format!("{role_id}/{}", p["PolicyName"].as_str().unwrap_or("")), p["PolicyDocument"].clone()));
        }
        for arn in role.properties["ManagedPolicyArns"].as_array().into_iter().flatten() {
            let (id, managed) = self
                .of_kind("AWS::IAM::ManagedPolicy")
                .find(|(id, r)| managed_policy_arn(id, r) == arn.as_str().unwrap_or_default())
                .unwrap_or_else(|| panic!("role {role_name}: managed policy {arn} is not in the template"));
            out.push((id.clone(), managed.properties["PolicyDocument"].clone()));
        }
        for (id, p) in self.of_kind("AWS::IAM::Policy") {
            if p.properties["Roles"].as_array().into_iter().flatten().any(|r| r == role_name) {
                out.push((id.clone(), p.properties["PolicyDocument"].clone()));
            }
        }
        out
    }

    /// The role (its name) each Lambda function runs as, by function name.
    pub fn function_roles(&self) -> BTreeMap<String, String> {
        self.of_kind("AWS::Lambda::Function")
            .map(|(_, f)| {
                let role = f.properties["Role"].as_str().unwrap_or_default();
                (
                    f.properties["FunctionName"].as_str().unwrap_or_default().to_string(),
                    role.rsplit('/').next().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// The forwarder's role: the one EKS Pod Identity assumes.
    pub fn forwarder_role(&self) -> (String, String) {
        let (id, role) = self
            .of_kind("AWS::IAM::Role")
            .find(|(_, r)| r.properties["AssumeRolePolicyDocument"].to_string().contains("pods.eks.amazonaws.com"))
            .expect("the forwarder's role");
        let name = role_name_of(id, role);
        (name.clone(), format!("arn:aws:iam::{ACCOUNT}:role/{name}"))
    }
}

fn role_name_of(id: &str, role: &Resource) -> String {
    role.properties["RoleName"].as_str().unwrap_or(id).to_string()
}

fn managed_policy_arn(id: &str, policy: &Resource) -> String {
    format!("arn:aws:iam::{ACCOUNT}:policy/{}", policy.properties["ManagedPolicyName"].as_str().unwrap_or(id))
}

impl Renderer<'_> {
    fn condition(&self, expr: &Value) -> Option<bool> {
        let obj = expr.as_object()?;
        let (k, v) = obj.iter().next()?;
        match k.as_str() {
            "Fn::Equals" => {
                let a = self.resolve(&v[0]);
                let b = self.resolve(&v[1]);
                Some(a == b)
            }
            "Fn::Not" => Some(!self.condition(&v[0])?),
            "Fn::And" | "Fn::Or" => {
                let values = v.as_array()?.iter().map(|c| self.condition(c)).collect::<Option<Vec<_>>>()?;
                Some(if k == "Fn::And" { values.iter().all(|x| *x) } else { values.iter().any(|x| *x) })
            }
            "Condition" => self.conditions.get(v.as_str()?).copied(),
            other => panic!("unsupported condition function {other}"),
        }
    }

    fn resolve(&self, value: &Value) -> Value {
        match value {
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.resolve(v)).filter(|v| v != NO_VALUE).collect())
            }
            Value::Object(obj) if obj.len() == 1 => {
                let (k, v) = obj.iter().next().expect("one key");
                match k.as_str() {
                    "Ref" => self.reference(v.as_str().expect("Ref name")),
                    "Fn::GetAtt" => {
                        let (id, attr) = match v {
                            Value::Array(p) => (p[0].as_str().unwrap_or_default().to_string(), self.resolve(&p[1])),
                            Value::String(s) => {
                                let (a, b) = s.split_once('.').expect("X.Attr");
                                (a.to_string(), Value::from(b))
                            }
                            _ => panic!("GetAtt {v}"),
                        };
                        self.attribute(&id, attr.as_str().unwrap_or_default())
                    }
                    "Fn::Sub" => self.sub(v),
                    "Fn::Join" => {
                        let sep = v[0].as_str().unwrap_or_default();
                        let parts = self.resolve(&v[1]);
                        Value::from(parts.as_array().expect("Join list").iter().map(text).collect::<Vec<_>>().join(sep))
                    }
                    "Fn::Split" => {
                        let sep = v[0].as_str().unwrap_or_default();
                        Value::Array(text(&self.resolve(&v[1])).split(sep).map(Value::from).collect())
                    }
                    "Fn::Select" => {
                        let i: usize = text(&self.resolve(&v[0])).parse().expect("Select index");
                        self.resolve(&v[1]).as_array().expect("Select list")[i].clone()
                    }
                    "Fn::If" => {
                        let cond = v[0].as_str().expect("If condition");
                        let holds = *self.conditions.get(cond).unwrap_or_else(|| panic!("condition {cond}"));
                        self.resolve(&v[if holds { 1 } else { 2 }])
                    }
                    "Fn::FindInMap" => {
                        let keys: Vec<String> = (0..3).map(|i| text(&self.resolve(&v[i]))).collect();
                        self.mappings[&keys[0]][&keys[1]][&keys[2]].clone()
                    }
                    "Fn::GetAZs" => Value::Array(vec![Value::from("eu-west-1a"), Value::from("eu-west-1b")]),
                    _ => Value::Object(
                        obj.iter().map(|(k, v)| (k.clone(), self.resolve(v))).filter(|(_, v)| v != NO_VALUE).collect(),
                    ),
                }
            }
            Value::Object(obj) => Value::Object(
                obj.iter().map(|(k, v)| (k.clone(), self.resolve(v))).filter(|(_, v)| v != NO_VALUE).collect(),
            ),
            other => other.clone(),
        }
    }

    fn sub(&self, v: &Value) -> Value {
        let (template, vars) = match v {
            Value::String(s) => (s.clone(), Map::new()),
            Value::Array(p) => (
                p[0].as_str().expect("Sub string").to_string(),
                p[1].as_object().cloned().unwrap_or_default().into_iter().map(|(k, v)| (k, self.resolve(&v))).collect(),
            ),
            _ => panic!("Sub {v}"),
        };
        let mut out = String::new();
        let mut rest = template.as_str();
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').expect("closing brace") + start;
            let name = &rest[start + 2..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str(&format!("${{{literal}}}"));
            } else if let Some(value) = vars.get(name) {
                out.push_str(&text(value));
            } else if let Some((id, attr)) = name.split_once('.').filter(|(id, _)| self.raw.contains_key(*id)) {
                out.push_str(&text(&self.attribute(id, attr)));
            } else {
                out.push_str(&text(&self.reference(name)));
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Value::from(out)
    }

    fn reference(&self, name: &str) -> Value {
        match name {
            "AWS::AccountId" => return Value::from(ACCOUNT),
            "AWS::Region" => return Value::from(REGION),
            "AWS::Partition" => return Value::from("aws"),
            "AWS::URLSuffix" => return Value::from("amazonaws.com"),
            "AWS::StackName" => return Value::from("ballast"),
            "AWS::NoValue" => return Value::from(NO_VALUE),
            _ => {}
        }
        if let Some(p) = self.parameters.get(name) {
            return p.clone();
        }
        let r = self.raw.get(name).unwrap_or_else(|| panic!("Ref to unknown {name}"));
        let p = self.resolve(r.get("Properties").unwrap_or(&Value::Null));
        let named = |key: &str| p[key].as_str().map(str::to_string).unwrap_or_else(|| name.to_string());
        Value::from(match r["Type"].as_str().unwrap_or_default() {
            "AWS::SQS::Queue" => format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{}", named("QueueName")),
            "AWS::SNS::Topic" => format!("arn:aws:sns:{REGION}:{ACCOUNT}:{}", named("TopicName")),
            "AWS::IAM::ManagedPolicy" => managed_policy_arn(name, &Resource { kind: String::new(), properties: p }),
            "AWS::IAM::Role" => named("RoleName"),
            "AWS::Lambda::Function" => named("FunctionName"),
            "AWS::Events::EventBus" | "AWS::Events::Rule" | "AWS::SSM::Parameter" => named("Name"),
            "AWS::DynamoDB::Table" => named("TableName"),
            "AWS::Logs::LogGroup" => named("LogGroupName"),
            "AWS::CloudWatch::Dashboard" => named("DashboardName"),
            _ => name.to_string(),
        })
    }

    fn attribute(&self, id: &str, attr: &str) -> Value {
        let r = self.raw.get(id).unwrap_or_else(|| panic!("GetAtt of unknown {id}"));
        let p = self.resolve(r.get("Properties").unwrap_or(&Value::Null));
        let named = |key: &str| p[key].as_str().map(str::to_string).unwrap_or_else(|| id.to_string());
        let kind = r["Type"].as_str().unwrap_or_default();
        Value::from(match (kind, attr) {
            ("AWS::SQS::Queue", "Arn") => format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{}", named("QueueName")),
            ("AWS::SQS::Queue", "QueueName") => named("QueueName"),
            ("AWS::SQS::Queue", "QueueUrl") => text(&self.reference(id)),
            ("AWS::DynamoDB::Table", "Arn") => {
                format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{}", named("TableName"))
            }
            ("AWS::Lambda::Function", "Arn") => {
                format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{}", named("FunctionName"))
            }
            ("AWS::IAM::Role", "Arn") => format!("arn:aws:iam::{ACCOUNT}:role/{}", named("RoleName")),
            ("AWS::Events::EventBus", "Arn") => {
                format!("arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{}", named("Name"))
            }
            ("AWS::Events::EventBus", "Name") => named("Name"),
            ("AWS::Events::Rule", "Arn") => match p["EventBusName"].as_str() {
                Some(bus) if bus != "default" => {
                    format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{bus}/{}", named("Name"))
                }
                _ => format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{}", named("Name")),
            },
            ("AWS::Logs::LogGroup", "Arn") => {
                format!("arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{}:*", named("LogGroupName"))
            }
            ("AWS::SNS::Topic", "TopicArn") => text(&self.reference(id)),
            ("AWS::SNS::Topic", "TopicName") => named("TopicName"),
            ("AWS::SSM::Parameter", "Name") => named("Name"),
            (kind, attr) => panic!("GetAtt {id}.{attr} of a {kind} is not modelled"),
        })
    }
}

/// A resolved value as text (numbers and booleans as CloudFormation would print them).
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A policy element that may be a string or a list, as a list of strings.
pub fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().map(text).collect(),
        Value::Null => Vec::new(),
        other => vec![text(other)],
    }
}
