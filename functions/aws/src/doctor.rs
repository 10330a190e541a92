//! `ballast doctor`: checks a deployment's wiring through the AWS APIs and says what
//! is wrong and how to fix it. Resource names follow the templates' conventions
//! (`ballast-CLUSTER-...`), each overridable.

use aws_sdk_dynamodb::types::{KeyType, ScalarAttributeType, TableStatus, TimeToLiveStatus};
use aws_sdk_eventbridge::types::RuleState;
use aws_sdk_sqs::types::QueueAttributeName;
use ballast_core::config::{
    check_one_role, resolve_pool_asgs, selectors, AsgRef, AsgSelector, Config, ResolveError, FUNCTIONS_GROUP,
};
use std::collections::BTreeMap;

use crate::autoscaling::{purchases_spot, AwsAutoscaling};
use crate::state::{KEY, TTL_ATTRIBUTE};

/// The tag the templates' IAM policies require on every ASG Ballast changes.
pub const POOL_TAG: &str = "ballast.io/pool";
/// The tag (value: the cluster's name) the templates' IAM policy also requires, so another
/// cluster's Ballast in the same account cannot change these ASGs.
pub const CLUSTER_TAG: &str = "ballast.io/cluster";

/// The hook transition Ballast drains for.
const TERMINATING: &str = "autoscaling:EC2_INSTANCE_TERMINATING";
/// The shortest termination-hook `HeartbeatTimeout` Ballast keeps open while the action
/// waits behind other drains: the functions heartbeat it at each SQS receive (and each
/// minute while another pool of the batch works), and receives come at most 5 minutes
/// (the retry's pause) plus a batching window and a lease wait apart, plus the wait for
/// one of the queue's concurrency slots, which drains may hold for a whole function
/// timeout (15 minutes at most): 21 minutes. A storm keeping every slot busy longer can
/// exceed it: AWS's default hour is the safer setting. (ballast-lambda's
/// `HOOK_HEARTBEAT_TIMEOUT_AT_LEAST`, whose test holds the sum under it.)
pub const HOOK_HEARTBEAT_TIMEOUT_AT_LEAST_SECS: u64 = 21 * 60;

/// The functions, by the name their role and function take after `ballast-CLUSTER-`.
pub const FUNCTIONS: [&str; 3] = ["interruption", "schedule", "cluster-events"];
/// The parts that note the config version they run on.
pub const VERSION_PARTS: [&str; 4] = ["schedule", "interruption", "cluster-events", "forwarder"];
/// A function takes a new version within a minute (its change event, else its minute's look).
const FUNCTIONS_FOLLOW_WITHIN: chrono::Duration = chrono::Duration::minutes(2);
/// The forwarder looks every minute and says so in demand events at least every heartbeat
/// (5 minutes by default).
const FORWARDER_FOLLOWS_WITHIN: chrono::Duration = chrono::Duration::minutes(7);

/// What a deployment is made of, by name.
#[derive(Debug, Clone)]
pub struct Wiring {
    /// The DynamoDB state table.
    pub table: String,
    /// The events queue the interruption function reads.
    pub queue: String,
    /// The events queue's dead-letter queue.
    pub dead_letter_queue: String,
    /// The forwarder's custom event bus.
    pub event_bus: String,
    /// (rule, bus, what it must target)
    pub rules: Vec<(String, String, Target)>,
    /// The config's home, the SSM parameter the functions and the forwarder follow.
    pub config_parameter: String,
}

/// Where an EventBridge rule must send its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The events queue.
    Queue,
    /// The named Lambda function.
    Function(String),
}

/// The AWS events the interruption function takes, one rule each.
pub const QUEUE_RULES: &[&str] =
    &["spot-interruption", "rebalance", "state-change", "launch-unsuccessful", "lifecycle", "health", "config-changed"];

impl Wiring {
    /// The names both templates give a deployment of `config`'s cluster (`ballast-CLUSTER-...`).
    pub fn conventional(config: &Config) -> Wiring {
        let prefix = format!("ballast-{}", config.cluster);
        let mut rules: Vec<(String, String, Target)> =
            QUEUE_RULES.iter().map(|r| (format!("{prefix}-{r}"), "default".to_string(), Target::Queue)).collect();
        rules.push((
            format!("{prefix}-forwarder"),
            prefix.clone(),
            Target::Function(format!("{prefix}-cluster-events")),
        ));
        Wiring {
            table: config.state_table.clone(),
            queue: format!("{prefix}-events"),
            dead_letter_queue: format!("{prefix}-events-dlq"),
            event_bus: prefix,
            rules,
            config_parameter: format!("/ballast/{}/config", config.cluster),
        }
    }
}

pub use ballast_core::finding::Finding;

fn ok(check: impl Into<String>, detail: impl Into<String>) -> Finding {
    Finding::ok(check, detail)
}

fn bad(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding::bad(check, detail, fix)
}

/// The top-level keys (and pools, by name) in which two configs differ.
fn differing_keys(a: &Config, b: &Config) -> Vec<String> {
    let (a, b) = (serde_json::to_value(a).unwrap_or_default(), serde_json::to_value(b).unwrap_or_default());
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return vec!["(everything)".into()] };
    let mut keys: Vec<String> = a.keys().chain(b.keys()).filter(|k| a.get(*k) != b.get(*k)).cloned().collect();
    keys.sort();
    keys.dedup();
    keys
}

fn err_text(e: impl std::error::Error) -> String {
    aws_smithy_types::error::display::DisplayErrorContext(e).to_string()
}

/// `ballast doctor`'s AWS checks, with the clients they read through.
pub struct Doctor {
    /// Reads the cluster and its access entries.
    pub eks: aws_sdk_eks::Client,
    /// Reads the config parameter.
    pub ssm: aws_sdk_ssm::Client,
    /// Reads the state table.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// Reads the queues.
    pub sqs: aws_sdk_sqs::Client,
    /// Reads the rules and the event bus.
    pub events: aws_sdk_eventbridge::Client,
    /// Reads the pools' ASGs and their hooks.
    pub autoscaling: AwsAutoscaling,
}

impl Doctor {
    /// Clients made from the shared SDK config.
    pub fn new(conf: &aws_config::SdkConfig) -> Self {
        Doctor {
            eks: aws_sdk_eks::Client::new(conf),
            ssm: aws_sdk_ssm::Client::new(conf),
            dynamodb: aws_sdk_dynamodb::Client::new(conf),
            sqs: aws_sdk_sqs::Client::new(conf),
            events: aws_sdk_eventbridge::Client::new(conf),
            autoscaling: AwsAutoscaling::new(conf),
        }
    }

    /// Every check of the deployment `wiring` names, for `config`, in order: each passed or what to fix.
    pub async fn check(&self, config: &Config, wiring: &Wiring) -> Vec<Finding> {
        let mut findings = vec![self.config_home(config, &wiring.config_parameter).await];
        findings.push(self.versions(&wiring.table, &wiring.config_parameter, chrono::Utc::now()).await);
        findings.extend(self.table(&wiring.table).await);
        let queue_arn = self.queues(wiring, &mut findings).await;
        self.rules(wiring, queue_arn.as_deref(), &mut findings).await;
        self.asgs(config, &mut findings).await;
        self.roles(config, &mut findings).await;
        findings
    }

    /// The function roles' way into the cluster: an access entry each, in the group the
    /// RBAC binds. On a cluster that authenticates with `aws-auth` only, the roles are
    /// returned for the caller to look up there.
    pub async fn access(&self, config: &Config) -> (Finding, Option<Vec<String>>) {
        let check = "cluster access entries".to_string();
        let cluster = match self.eks.describe_cluster().name(&config.cluster).send().await {
            Ok(out) => out.cluster,
            Err(e) => {
                let fix = format!(
                    "check `cluster` and `region` in the config, and that doctor may eks:DescribeCluster {}",
                    config.cluster
                );
                return (bad(check, format!("cannot describe cluster {}: {}", config.cluster, err_text(e)), fix), None);
            }
        };
        let Some(cluster) = cluster else {
            return (bad(check, "DescribeCluster answered without a cluster", "run doctor again"), None);
        };
        // arn:PARTITION:eks:REGION:ACCOUNT:cluster/NAME
        let arn: Vec<&str> = cluster.arn().unwrap_or_default().split(':').collect();
        let (Some(partition), Some(account)) = (arn.get(1), arn.get(4)) else {
            return (
                bad(check, format!("the cluster's ARN {:?} is not an EKS ARN", cluster.arn()), "run doctor again"),
                None,
            );
        };
        let roles: Vec<String> = FUNCTIONS
            .iter()
            .map(|f| format!("arn:{partition}:iam::{account}:role/ballast-{}-{f}", config.cluster))
            .collect();
        let mode = cluster.access_config().and_then(|a| a.authentication_mode());
        if mode == Some(&aws_sdk_eks::types::AuthenticationMode::ConfigMap) {
            return (
                ok(check, "the cluster authenticates with aws-auth only (CONFIG_MAP): no access entries; aws-auth is checked instead"),
                Some(roles),
            );
        }
        // With API_AND_CONFIG_MAP, a role with no entry may be mapped in aws-auth instead.
        let config_map_too = mode != Some(&aws_sdk_eks::types::AuthenticationMode::Api);
        let mut missing = Vec::new();
        let mut in_aws_auth = Vec::new();
        for role in &roles {
            match self.eks.describe_access_entry().cluster_name(&config.cluster).principal_arn(role).send().await {
                Ok(out) => {
                    let groups = out.access_entry().map(|e| e.kubernetes_groups()).unwrap_or_default();
                    if !groups.iter().any(|g| g == FUNCTIONS_GROUP) {
                        missing.push((role, format!("{role} is in {groups:?}, not {FUNCTIONS_GROUP}")));
                    }
                }
                Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => {
                    if config_map_too {
                        in_aws_auth.push(role.clone());
                    } else {
                        missing.push((role, format!("{role} has no access entry")))
                    }
                }
                Err(e) => {
                    return (
                        bad(
                            check,
                            format!("cannot read the access entry of {role}: {}", err_text(e)),
                            "allow eks:DescribeAccessEntry on the cluster to whoever runs doctor",
                        ),
                        None,
                    )
                }
            }
        }
        let in_aws_auth = (!in_aws_auth.is_empty()).then_some(in_aws_auth);
        if missing.is_empty() {
            let detail = match &in_aws_auth {
                None => format!("the {} function roles are in {FUNCTIONS_GROUP}", roles.len()),
                Some(rest) => format!(
                    "{} of {} function roles have an entry in {FUNCTIONS_GROUP}; {} none (looked up in aws-auth)",
                    roles.len() - rest.len(),
                    roles.len(),
                    rest.join(", ")
                ),
            };
            return (ok(check, detail), in_aws_auth);
        }
        let commands: Vec<String> = missing
            .iter()
            .map(|(role, _)| {
                format!(
                    "aws eks create-access-entry --cluster-name {} --principal-arn {role} --kubernetes-groups {FUNCTIONS_GROUP}",
                    config.cluster
                )
            })
            .collect();
        let why: Vec<String> = missing.into_iter().map(|(_, why)| why).collect();
        (
            bad(
                check,
                why.join("; "),
                format!("deploy with ClusterAccessEntries=true (-c accessEntries=true), or: {}", commands.join("; ")),
            ),
            in_aws_auth,
        )
    }

    /// The live config: there, valid, within the parameter's size, and the one given.
    async fn config_home(&self, config: &Config, parameter: &str) -> Finding {
        let check = format!("config {parameter}");
        let live = match crate::ssm::read_if_any(&self.ssm, parameter).await {
            Ok(Some(live)) => live,
            Ok(None) => {
                return bad(
                    check,
                    "not there: the functions and the forwarder have no config to run on",
                    "ballast config push ballast.yaml",
                )
            }
            Err(e) => {
                return bad(
                    check,
                    format!("cannot read it: {e}"),
                    "allow ssm:GetParameter on it to whoever runs doctor",
                )
            }
        };
        let version = live.version;
        match Config::from_yaml(&live.text) {
            Err(e) => bad(
                check,
                format!("version {version} is invalid (the functions stay on the last good version): {e}"),
                "ballast config push ballast.yaml (it validates first)",
            ),
            Ok(_) if live.text.len() > ballast_core::config::PARAMETER_MAX_BYTES => bad(
                check,
                format!(
                    "version {version} has {} bytes, over the parameter's {}",
                    live.text.len(),
                    ballast_core::config::PARAMETER_MAX_BYTES
                ),
                "shorten it and push it again",
            ),
            // The kill switch leaves the live version in dry run and the file live: pushing
            // the file is then going live again, never a fix to suggest blindly.
            Ok(running) if running.dry_run && !config.dry_run && running == Config { dry_run: true, ..config.clone() } => bad(
                check,
                format!("version {version} is in dry run and the config given is live (the kill switch?); nothing else differs"),
                "when you mean to go live again: ballast config push ballast.yaml",
            ),
            Ok(running) if running != *config => bad(
                check,
                format!("version {version} differs from the config given here in: {}", differing_keys(&running, config).join(", ")),
                "ballast config push ballast.yaml (it shows the difference), or `ballast config pull` to see what runs",
            ),
            Ok(running) => ok(
                check,
                format!(
                    "version {version}, {} byte(s), {}, the same as the config given",
                    live.text.len(),
                    if running.dry_run { "dry run" } else { "live" }
                ),
            ),
        }
    }

    /// Whether the functions and the forwarder run the parameter's version: each notes
    /// the version it takes in the state table (the forwarder's comes in its demand events,
    /// at least every heartbeat). Functions follow within a minute of a change, the
    /// forwarder within its minute plus a heartbeat; one idle since (an interruption
    /// function with no event) is reported, not failed.
    async fn versions(&self, table: &str, parameter: &str, now: chrono::DateTime<chrono::Utc>) -> Finding {
        let check = "config versions".to_string();
        let live = match crate::ssm::read_if_any(&self.ssm, parameter).await {
            Ok(Some(live)) => live,
            Ok(None) => return bad(check, format!("no config at {parameter}"), "ballast config push ballast.yaml"),
            Err(e) => return bad(check, format!("cannot read {parameter}: {e}"), "allow ssm:GetParameter on it"),
        };
        let store = crate::state::DynamoStore::from_client(self.dynamodb.clone(), table);
        let notes = match store.config_versions(&VERSION_PARTS).await {
            Ok(notes) => notes,
            Err(e) => return bad(check, format!("cannot read the notes in {table}: {e}"), "deploy the stack"),
        };
        let since_written = live.modified.map(|m| now - m).unwrap_or_else(chrono::Duration::zero);
        let said: Vec<String> = VERSION_PARTS
            .iter()
            .map(|part| match notes.iter().find(|n| n.part == *part) {
                Some(n) => format!("{part} {} (noted {})", n.version, n.at.format("%Y-%m-%d %H:%M:%SZ")),
                None => format!("{part} none noted"),
            })
            .collect();
        let detail = format!("parameter version {}; {}", live.version, said.join(", "));
        let forwarder = notes.iter().find(|n| n.part == "forwarder");
        match forwarder {
            // Right after the overlay is applied no forwarder has said yet (its first demand
            // event comes within a heartbeat): said, not failed.
            None => ok(check, format!("{detail} (no forwarder report yet: `kubectl -n ballast logs deploy/ballast-forwarder`)")),
            Some(f) if f.version < live.version && since_written > FORWARDER_FOLLOWS_WITHIN => bad(
                check,
                detail,
                "the forwarder runs an older version: `kubectl -n ballast logs deploy/ballast-forwarder` (a refused version is logged, ballast_forwarder_config_refused_total)",
            ),
            _ => match notes.iter().find(|n| n.part == "schedule") {
                Some(s) if s.version < live.version && since_written > FUNCTIONS_FOLLOW_WITHIN => bad(
                    check,
                    detail,
                    "the schedule function runs an older version: its log says why (\"config refused\", metric ConfigRefused)",
                ),
                _ => ok(check, detail),
            },
        }
    }

    async fn table(&self, table: &str) -> Vec<Finding> {
        let check = format!("table {table}");
        let described = match self.dynamodb.describe_table().table_name(table).send().await {
            Ok(out) => out,
            Err(e) => {
                return vec![bad(
                    check,
                    format!("not found: {}", err_text(e)),
                    "deploy the stack, or set state_table to the table's name",
                )]
            }
        };
        let mut findings = Vec::new();
        let Some(t) = described.table() else { return vec![bad(check, "no description", "check the table")] };
        let hash_key =
            t.key_schema().iter().find(|k| k.key_type() == &KeyType::Hash).map(|k| k.attribute_name().to_string());
        let key_is_string = t
            .attribute_definitions()
            .iter()
            .any(|a| a.attribute_name() == KEY && a.attribute_type() == &ScalarAttributeType::S);
        if hash_key.as_deref() != Some(KEY) || !key_is_string {
            findings.push(bad(
                &check,
                format!("partition key is {hash_key:?}, not `{KEY}` (string)"),
                format!("recreate the table with partition key `{KEY}` of type S"),
            ));
        } else if t.table_status() != Some(&TableStatus::Active) {
            findings.push(bad(&check, format!("status {:?}", t.table_status()), "wait until the table is ACTIVE"));
        } else {
            findings.push(ok(&check, format!("ACTIVE, partition key `{KEY}`")));
        }
        let ttl = self.dynamodb.describe_time_to_live().table_name(table).send().await;
        let ttl_check = format!("table {table} TTL");
        match ttl.ok().and_then(|o| o.time_to_live_description().cloned()) {
            Some(d) if d.time_to_live_status() == Some(&TimeToLiveStatus::Enabled) && d.attribute_name() == Some(TTL_ATTRIBUTE) => {
                findings.push(ok(ttl_check, format!("enabled on `{TTL_ATTRIBUTE}`")))
            }
            other => findings.push(bad(
                ttl_check,
                format!("not enabled on `{TTL_ATTRIBUTE}` ({:?})", other.and_then(|d| d.time_to_live_status().cloned())),
                format!("aws dynamodb update-time-to-live --table-name {table} --time-to-live-specification Enabled=true,AttributeName={TTL_ATTRIBUTE}"),
            )),
        }
        findings
    }

    async fn queue_arn(&self, name: &str) -> Result<(String, Option<String>), String> {
        self.queue_attributes(name).await.map(|(arn, redrive, _)| (arn, redrive))
    }

    /// (ARN, redrive policy, (visibility timeout, retention) in seconds) of a queue.
    async fn queue_attributes(&self, name: &str) -> Result<(String, Option<String>, (u64, u64)), String> {
        let url = crate::dead_letters::queue_url(&self.sqs, name).await.map_err(|e| e.to_string())?;
        let attrs = self
            .sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .map_err(err_text)?;
        let map = attrs.attributes().cloned().unwrap_or_default();
        let arn = map.get(&QueueAttributeName::QueueArn).cloned().unwrap_or_default();
        let seconds = |a: QueueAttributeName| map.get(&a).and_then(|v| v.parse::<u64>().ok()).unwrap_or_default();
        let times =
            (seconds(QueueAttributeName::VisibilityTimeout), seconds(QueueAttributeName::MessageRetentionPeriod));
        Ok((arn, map.get(&QueueAttributeName::RedrivePolicy).cloned(), times))
    }

    async fn queues(&self, wiring: &Wiring, findings: &mut Vec<Finding>) -> Option<String> {
        let dlq_arn = match self.queue_arn(&wiring.dead_letter_queue).await {
            Ok((arn, _)) => {
                findings.push(ok(format!("queue {}", wiring.dead_letter_queue), "exists"));
                Some(arn)
            }
            Err(e) => {
                findings.push(bad(
                    format!("queue {}", wiring.dead_letter_queue),
                    format!("not found: {e}"),
                    "deploy the stack: malformed events need a dead-letter queue",
                ));
                None
            }
        };
        match self.queue_attributes(&wiring.queue).await {
            Ok((arn, redrive, (visibility, retention))) => {
                let policy = redrive.as_deref().and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok());
                let target = policy.as_ref().and_then(|v| v["deadLetterTargetArn"].as_str().map(str::to_string));
                // maxReceiveCount is a number or a string, depending on who wrote it.
                let receives = policy
                    .as_ref()
                    .and_then(|v| v["maxReceiveCount"].as_u64().or_else(|| v["maxReceiveCount"].as_str()?.parse().ok()))
                    .unwrap_or(0);
                let needed = 2 * visibility * receives;
                findings.push(if retention >= needed {
                    ok(
                        format!("queue {} retention", wiring.queue),
                        format!("{retention} s, at least twice VisibilityTimeout {visibility} s x maxReceiveCount {receives}"),
                    )
                } else {
                    bad(
                        format!("queue {} retention", wiring.queue),
                        format!(
                            "{retention} s is under twice VisibilityTimeout {visibility} s x maxReceiveCount {receives}: a message that keeps failing expires before it reaches the dead-letter queue"
                        ),
                        format!("raise MessageRetentionPeriod to at least {needed} (the templates use 345600)"),
                    )
                });
                match (target, &dlq_arn) {
                    (Some(t), Some(dlq)) if t == *dlq => findings.push(ok(
                        format!("queue {}", wiring.queue),
                        format!("redrives to {}", wiring.dead_letter_queue),
                    )),
                    (t, _) => findings.push(bad(
                        format!("queue {}", wiring.queue),
                        format!("redrive policy targets {t:?}, not {}", wiring.dead_letter_queue),
                        format!(
                            "set the queue's RedrivePolicy deadLetterTargetArn to the ARN of {}",
                            wiring.dead_letter_queue
                        ),
                    )),
                }
                Some(arn)
            }
            Err(e) => {
                findings.push(bad(
                    format!("queue {}", wiring.queue),
                    format!("not found: {e}"),
                    "deploy the stack (sam deploy or cdk deploy)",
                ));
                None
            }
        }
    }

    async fn rules(&self, wiring: &Wiring, queue_arn: Option<&str>, findings: &mut Vec<Finding>) {
        for (rule, bus, target) in &wiring.rules {
            let check = format!("rule {rule} (bus {bus})");
            let described = match self.events.describe_rule().name(rule).event_bus_name(bus).send().await {
                Ok(d) => d,
                Err(e) => {
                    findings.push(bad(
                        check,
                        format!("not found: {}", err_text(e)),
                        "deploy the stack; the rule feeds Ballast its events",
                    ));
                    continue;
                }
            };
            if described.state() != Some(&RuleState::Enabled) {
                findings.push(bad(
                    &check,
                    format!("state {:?}", described.state()),
                    format!("aws events enable-rule --name {rule} --event-bus-name {bus}"),
                ));
                continue;
            }
            let targets = match self.events.list_targets_by_rule().rule(rule).event_bus_name(bus).send().await {
                Ok(t) => t.targets().iter().map(|t| t.arn().to_string()).collect::<Vec<_>>(),
                Err(e) => {
                    findings.push(bad(
                        &check,
                        format!("cannot list targets: {}", err_text(e)),
                        "check the rule's targets",
                    ));
                    continue;
                }
            };
            let (wanted, hit) = match target {
                Target::Queue => (wiring.queue.clone(), queue_arn.is_some_and(|q| targets.iter().any(|t| t == q))),
                Target::Function(f) => (
                    f.clone(),
                    targets
                        .iter()
                        .any(|t| t.ends_with(&format!(":function:{f}")) || t.contains(&format!(":function:{f}:"))),
                ),
            };
            if hit {
                findings.push(ok(&check, format!("enabled, targets {wanted}")));
            } else {
                findings.push(bad(
                    &check,
                    format!("enabled but targets {targets:?}, not {wanted}"),
                    format!("add {wanted} as a target of {rule}"),
                ));
            }
        }
    }

    /// A termination hook must stay open while its action waits behind another run's
    /// drain: Ballast heartbeats it at each SQS retry, which come minutes apart.
    async fn hooks(&self, check: &str, asg: &str, findings: &mut Vec<Finding>) {
        let at_least = HOOK_HEARTBEAT_TIMEOUT_AT_LEAST_SECS;
        let hooks = match self.autoscaling.client().describe_lifecycle_hooks().auto_scaling_group_name(asg).send().await
        {
            Ok(out) => out.lifecycle_hooks.unwrap_or_default(),
            Err(e) => {
                return findings.push(bad(
                    format!("{check}: {asg} lifecycle hooks"),
                    err_text(e),
                    "check the credentials' autoscaling:DescribeLifecycleHooks permission",
                ))
            }
        };
        let terminating = hooks.iter().filter(|h| h.lifecycle_transition() == Some(TERMINATING));
        for hook in terminating {
            let name = hook.lifecycle_hook_name().unwrap_or_default();
            let check = format!("{check}: {asg} lifecycle hook {name}");
            match hook.heartbeat_timeout() {
                Some(t) if u64::try_from(t).unwrap_or_default() < at_least => findings.push(bad(
                    check,
                    format!(
                        "HeartbeatTimeout {t} s is under {at_least} s: an action waiting behind another drain may end \
                         undrained between Ballast's heartbeats"
                    ),
                    format!(
                        "aws autoscaling put-lifecycle-hook --auto-scaling-group-name {asg} --lifecycle-hook-name {name} \
                         --lifecycle-transition {TERMINATING} --heartbeat-timeout {at_least}"
                    ),
                )),
                t => findings.push(ok(
                    check,
                    format!("terminating, HeartbeatTimeout {} s", t.map_or("3600 (the default)".into(), |t| t.to_string())),
                )),
            }
        }
    }

    /// The pools resolved as the functions resolve them: an ASG two selectors take (two
    /// roles of a pool, or two pools) is refused there, so neither pool is reconciled.
    async fn roles(&self, config: &Config, findings: &mut Vec<Finding>) {
        let mut listed: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for pool in &config.pools {
            for (_, selector) in selectors(pool) {
                // A listing that fails is reported by the ASG checks.
                for group in self.autoscaling.select(selector).await.unwrap_or_default() {
                    let name = group.auto_scaling_group_name().unwrap_or_default().to_string();
                    listed.insert(name, crate::autoscaling::tags_of(&group));
                }
            }
        }
        let refs = || listed.iter().map(|(name, tags)| AsgRef { name, tags });
        for pool in &config.pools {
            let outcome = resolve_pool_asgs(pool, refs()).and_then(|resolved| {
                let mine: Vec<&str> = resolved.spot.iter().copied().chain(resolved.on_demand).collect();
                check_one_role(pool, &config.pools, refs().filter(|a| mine.contains(&a.name)))
            });
            if let Err(e @ ResolveError::TwoRoles { .. }) = outcome {
                findings.push(bad(
                    format!("pool {} ASG roles", pool.name),
                    e.to_string(),
                    "narrow the selectors in the config, or retag the ASG, so that each ASG serves one role of one pool",
                ));
            }
        }
    }

    async fn asgs(&self, config: &Config, findings: &mut Vec<Finding>) {
        for pool in &config.pools {
            let selectors =
                pool.spot_asgs.iter().map(|s| (s, true)).chain(pool.on_demand_asg.as_ref().map(|s| (s, false)));
            for (selector, spot) in selectors {
                let kind = if spot { "spot" } else { "on-demand" };
                let check = format!("pool {} {kind} ASG {selector}", pool.name);
                match self.autoscaling.select(selector).await {
                    Err(e) => findings.push(bad(
                        check,
                        e.to_string(),
                        "check the credentials' autoscaling:Describe* permissions",
                    )),
                    Ok(groups) if groups.is_empty() => findings.push(bad(
                        check,
                        "no such ASG".to_string(),
                        match selector {
                            AsgSelector::Name(_) => "fix the ASG name in the config".to_string(),
                            AsgSelector::Tags(_) => "tag the ASGs, or fix the tag selector in the config".to_string(),
                        },
                    )),
                    Ok(groups) if !spot && groups.len() != 1 => findings.push(bad(
                        check,
                        format!("matches {} ASGs", groups.len()),
                        "the on-demand selector must match exactly one ASG",
                    )),
                    Ok(groups) => {
                        for group in groups {
                            let name = group.auto_scaling_group_name().unwrap_or_default().to_string();
                            let buys_spot = purchases_spot(&group);
                            let tags = crate::autoscaling::tags_of(&group);
                            let mut missing = Vec::new();
                            if !tags.contains_key(POOL_TAG) {
                                missing.push((POOL_TAG, pool.name.as_str()));
                            }
                            if tags.get(CLUSTER_TAG) != Some(&config.cluster) {
                                missing.push((CLUSTER_TAG, config.cluster.as_str()));
                            }
                            if buys_spot == spot && !missing.is_empty() {
                                let wanted: Vec<String> = missing.iter().map(|(k, v)| format!("{k}={v}")).collect();
                                let fix: Vec<String> = missing
                                    .iter()
                                    .map(|(k, v)| format!("ResourceId={name},ResourceType=auto-scaling-group,Key={k},Value={v},PropagateAtLaunch=false"))
                                    .collect();
                                findings.push(bad(
                                    format!("{check}: {name}"),
                                    format!("found, buys {kind}, but lacks the tag {}, so the functions' IAM policy denies changing it", wanted.join(" and ")),
                                    format!("aws autoscaling create-or-update-tags --tags {}", fix.join(" ")),
                                ));
                            } else if buys_spot == spot {
                                self.hooks(&check, &name, findings).await;
                                findings.push(ok(
                                    format!("{check}: {name}"),
                                    format!(
                                        "found, buys {kind}, tagged {POOL_TAG} and {CLUSTER_TAG}={}",
                                        config.cluster
                                    ),
                                ));
                            } else {
                                findings.push(bad(
                                    format!("{check}: {name}"),
                                    format!("found, but its purchase options buy {}", if buys_spot { "spot" } else { "on-demand" }),
                                    if spot {
                                        "give it a MixedInstancesPolicy with OnDemandPercentageAboveBaseCapacity 0, or list it as the on-demand ASG".to_string()
                                    } else {
                                        "use an on-demand ASG (OnDemandPercentageAboveBaseCapacity 100), or list it under spot_asgs".to_string()
                                    },
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
}
