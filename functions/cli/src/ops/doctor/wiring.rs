//! The deployment's event wiring: its queues (dead-letter redrive, retention,
//! visibility) and the EventBridge rules that feed them.

use super::*;

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

impl Doctor {
    /// (ARN, redrive policy, (visibility timeout, retention) in seconds) of a queue; or
    /// why not, and the kind of trouble the call met.
    pub(super) async fn queue_attributes(
        &self,
        name: &str,
    ) -> Result<(String, Option<String>, (u64, u64)), (String, ballast_aws::Trouble)> {
        use aws_sdk_sqs::operation::get_queue_url::GetQueueUrlError;
        let url = ballast_aws::dead_letters::queue_url(&self.sqs, name)
            .await
            .map_err(|e| (e.to_string(), port_trouble::<GetQueueUrlError>(&e)))?;
        let attrs = self
            .sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .map_err(|e| (ballast_aws::trouble(&e), e))
            .map_err(|(trouble, e)| (err_text(e), trouble))?;
        let map = attrs.attributes().cloned().unwrap_or_default();
        let arn = map.get(&QueueAttributeName::QueueArn).cloned().unwrap_or_default();
        let seconds = |a: QueueAttributeName| map.get(&a).and_then(|v| v.parse::<u64>().ok()).unwrap_or_default();
        let times =
            (seconds(QueueAttributeName::VisibilityTimeout), seconds(QueueAttributeName::MessageRetentionPeriod));
        Ok((arn, map.get(&QueueAttributeName::RedrivePolicy).cloned(), times))
    }

    pub(super) async fn queues(&self, wiring: &Wiring, findings: &mut Vec<Finding>) -> Option<String> {
        let dlq_arn = match self.queue_attributes(&wiring.dead_letter_queue).await {
            Ok((arn, _, _)) => {
                findings.push(ok(format!("queue {}", wiring.dead_letter_queue), "exists"));
                Some(arn)
            }
            Err((e, trouble)) => {
                findings.push(bad(
                    format!("queue {}", wiring.dead_letter_queue),
                    e,
                    fix_for(trouble, self.region(), "deploy the stack: malformed events need a dead-letter queue"),
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
            Err((e, trouble)) => {
                let fix = fix_for(trouble, self.region(), "deploy the stack (sam deploy or cdk deploy)");
                findings.push(bad(format!("queue {}", wiring.queue), e, fix));
                None
            }
        }
    }

    pub(super) async fn rules(&self, wiring: &Wiring, queue_arn: Option<&str>, findings: &mut Vec<Finding>) {
        for (rule, bus, target) in &wiring.rules {
            let check = format!("rule {rule} (bus {bus})");
            let described = match self.events.describe_rule().name(rule).event_bus_name(bus).send().await {
                Ok(d) => d,
                Err(e) => {
                    let fix = fix_for(
                        ballast_aws::trouble(&e),
                        self.region(),
                        "deploy the stack; the rule feeds Ballast its events",
                    );
                    findings.push(bad(check, not_found_or(e), fix));
                    continue;
                }
            };
            if described.state() != Some(&RuleState::Enabled) {
                findings.push(bad(
                    &check,
                    format!("state {}", described.state().map_or("unknown", |s| s.as_str())),
                    format!("aws events enable-rule --name {rule} --event-bus-name {bus}"),
                ));
                continue;
            }
            let targets = match self.events.list_targets_by_rule().rule(rule).event_bus_name(bus).send().await {
                Ok(t) => t.targets().iter().map(|t| t.arn().to_string()).collect::<Vec<_>>(),
                Err(e) => {
                    let fix = fix_for(ballast_aws::trouble(&e), self.region(), "check the rule's targets");
                    findings.push(bad(&check, format!("cannot list targets: {}", err_text(e)), fix));
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
}
