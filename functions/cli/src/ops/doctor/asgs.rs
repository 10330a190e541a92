//! The pools' ASGs as the account has them: each resolved to one role, tagged for the
//! templates' IAM policies, with a termination hook that stays open long enough; and
//! the functions' roles.

use super::*;

impl Doctor {
    /// A termination hook must stay open while its action waits behind another run's
    /// drain: Ballast heartbeats it at each SQS retry, which come minutes apart (the
    /// functions' own bound, where their test holds the longest gap under it).
    pub(super) async fn hooks(&self, check: &str, asg: &str, findings: &mut Vec<Finding>) {
        let at_least = ballast_lambda::handlers::HOOK_HEARTBEAT_TIMEOUT_AT_LEAST.as_secs();
        let hooks = match self.autoscaling.client().describe_lifecycle_hooks().auto_scaling_group_name(asg).send().await
        {
            Ok(out) => out.lifecycle_hooks.unwrap_or_default(),
            Err(e) => {
                let fix = fix_for(
                    ballast_aws::trouble(&e),
                    self.region(),
                    "check the credentials' autoscaling:DescribeLifecycleHooks permission",
                );
                return findings.push(bad(format!("{check}: {asg} lifecycle hooks"), err_text(e), fix));
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
    pub(super) async fn roles(&self, config: &Config, findings: &mut Vec<Finding>) {
        let mut listed: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for pool in &config.pools {
            for (_, selector) in selectors(pool) {
                // A listing that fails is reported by the ASG checks.
                for group in self.autoscaling.select(selector).await.unwrap_or_default() {
                    let name = group.auto_scaling_group_name().unwrap_or_default().to_string();
                    listed.insert(name, ballast_aws::autoscaling::tags_of(&group));
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

    pub(super) async fn asgs(&self, config: &Config, findings: &mut Vec<Finding>) {
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
                        fix_for(
                            ballast_aws::trouble_in_chain(&e),
                            self.region(),
                            "check the credentials' autoscaling:Describe* permissions",
                        ),
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
                            let tags = ballast_aws::autoscaling::tags_of(&group);
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
