//! `ballast doctor`'s look at the cluster side, through the operator's kubeconfig: may the
//! functions' group do what the functions do (asked of the API server's own authorizer,
//! so an RBAC written differently from infra/k8s still counts), does the forwarder run,
//! and, on a cluster still on `aws-auth`, are the function roles mapped to the group.

use std::collections::BTreeSet;
use std::fmt;

use ballast_core::config::{Config, FUNCTIONS_GROUP};
use ballast_core::finding::Finding;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use ballast_kube::headroom::deployment_name;

/// Where infra/k8s runs the forwarder.
pub const FORWARDER_NAMESPACE: &str = "ballast";
/// The forwarder's Deployment in [`FORWARDER_NAMESPACE`].
pub const FORWARDER_DEPLOYMENT: &str = "ballast-forwarder";
/// Who the access reviews ask about: any member of the group.
const PROBE_USER: &str = "ballast-doctor-probe";

/// One thing the functions do in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    /// The RBAC verb: `get`, `list`, `patch`, `create`...
    pub verb: &'static str,
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The resource, plural: `nodes`, `pods`, `deployments`...
    pub resource: &'static str,
    /// A subresource such as `eviction`.
    pub subresource: Option<&'static str>,
    /// One object by name, or `None` for any.
    pub name: Option<String>,
    /// `None`: cluster-wide (or in every namespace).
    pub namespace: Option<String>,
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(sub) = self.subresource {
            write!(f, "/{sub}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        Ok(())
    }
}

/// What the functions do with the Kubernetes API for this config: list and cordon nodes,
/// list and evict pods (in any namespace), read each pool's PriorityClass, and keep each
/// pool's pause-pod Deployments (one per slot its `headroom.shapes` allows) in its
/// namespace (server-side apply: get, patch, create).
pub fn needs(config: &Config) -> Vec<Need> {
    let cluster =
        |verb, group, resource, subresource| Need { verb, group, resource, subresource, name: None, namespace: None };
    let mut needs: BTreeSet<Need> = [
        cluster("list", "", "nodes", None),
        cluster("patch", "", "nodes", None),
        cluster("list", "", "pods", None),
        cluster("create", "", "pods", Some("eviction")),
    ]
    .into_iter()
    .collect();
    for pool in &config.pools {
        let h = &pool.headroom;
        needs.insert(Need {
            name: Some(h.priority_class.name.clone()),
            ..cluster("get", "scheduling.k8s.io", "priorityclasses", None)
        });
        let namespace = Some(h.namespace.clone());
        // Each Deployment the pool's `headroom.shapes` may run, one per slot.
        for slot in 0..h.shapes.deployments() {
            for verb in ["get", "patch"] {
                needs.insert(Need {
                    name: Some(deployment_name(pool, slot)),
                    namespace: namespace.clone(),
                    ..cluster(verb, "apps", "deployments", None)
                });
            }
        }
        needs.insert(Need { namespace, ..cluster("create", "apps", "deployments", None) });
    }
    needs.into_iter().collect()
}

/// The operator's kubeconfig (its current context), as kubectl reads it, and the API
/// server it points at, for the findings to name.
pub async fn connect() -> Result<(kube::Client, String), String> {
    let config = kube::Config::from_kubeconfig(&Default::default()).await.map_err(|e| e.to_string())?;
    let server = config.cluster_url.to_string();
    let connector = ballast_kube::Connector::fixed(config).map_err(|e| e.to_string())?;
    let client = connector.client().await.map_err(|e| e.to_string())?;
    Ok((client, server))
}

/// Asks the API server whether the group may do each thing the functions do.
pub async fn rbac(client: &kube::Client, config: &Config) -> Finding {
    let check = format!("cluster RBAC of group {FUNCTIONS_GROUP}");
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let needs = needs(config);
    let mut denied = Vec::new();
    for need in &needs {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(PROBE_USER.into()),
                groups: Some(vec![FUNCTIONS_GROUP.into()]),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(need.verb.into()),
                    group: Some(need.group.into()),
                    resource: Some(need.resource.into()),
                    subresource: need.subresource.map(str::to_string),
                    name: need.name.clone(),
                    namespace: need.namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match reviews.create(&PostParams::default(), &review).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) => denied.push(need.to_string()),
            Err(e) => {
                return Finding::bad(
                    check,
                    format!("cannot ask the API server (SubjectAccessReview): {e}"),
                    "run doctor with a kubeconfig that may create subjectaccessreviews (a cluster admin's)",
                )
            }
        }
    }
    if denied.is_empty() {
        Finding::ok(check, format!("may do all {} things the functions do", needs.len()))
    } else {
        Finding::bad(
            check,
            format!("may not {}", denied.join(", ")),
            "kubectl apply -k deploy/$CLUSTER (infra/k8s/functions-rbac.yaml: every pool's headroom Deployment named in the Role of its namespace)",
        )
    }
}

/// Whether the forwarder's Deployment is there and available.
pub async fn forwarder(client: &kube::Client) -> Finding {
    let check = format!("forwarder {FORWARDER_NAMESPACE}/{FORWARDER_DEPLOYMENT}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), FORWARDER_NAMESPACE);
    match deployments.get_opt(FORWARDER_DEPLOYMENT).await {
        Err(e) => Finding::bad(
            check,
            format!("cannot read it: {e}"),
            "run doctor with a kubeconfig that may read Deployments in ballast",
        ),
        Ok(None) => Finding::bad(
            check,
            "not deployed",
            "kubectl apply -k deploy/$CLUSTER (docs/src/getting-started.md, step 4)",
        ),
        Ok(Some(d)) => {
            let status = d.status.unwrap_or_default();
            let available = status.available_replicas.unwrap_or(0);
            if available > 0 {
                Finding::ok(check, format!("{available} available"))
            } else {
                Finding::bad(
                    check,
                    format!("deployed, none available (of {} replicas)", status.replicas.unwrap_or(0)),
                    format!("kubectl -n {FORWARDER_NAMESPACE} describe deploy/{FORWARDER_DEPLOYMENT}; kubectl -n {FORWARDER_NAMESPACE} logs deploy/{FORWARDER_DEPLOYMENT}"),
                )
            }
        }
    }
}

/// On a cluster whose authentication mode is `CONFIG_MAP`: whether `kube-system/aws-auth`
/// maps each role to the group.
pub async fn aws_auth(client: &kube::Client, role_arns: &[String]) -> Finding {
    let check = "cluster access (aws-auth)".to_string();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let text = match maps.get_opt("aws-auth").await {
        Err(e) => {
            return Finding::bad(
                check,
                format!("cannot read kube-system/aws-auth: {e}"),
                "run doctor with a cluster admin's kubeconfig",
            )
        }
        Ok(map) => map.and_then(|m| m.data).and_then(|d| d.get("mapRoles").cloned()).unwrap_or_default(),
    };
    let missing = unmapped(&text, role_arns);
    if missing.is_empty() {
        return Finding::ok(check, format!("maps the {} function roles to {FUNCTIONS_GROUP}", role_arns.len()));
    }
    let entries: Vec<String> = missing
        .iter()
        .map(|arn| {
            format!("- rolearn: {arn}\n  username: ballast-function:{{{{SessionName}}}}\n  groups: [{FUNCTIONS_GROUP}]")
        })
        .collect();
    Finding::bad(
        check,
        format!("does not map {} to {FUNCTIONS_GROUP}", missing.join(", ")),
        format!(
            "add to mapRoles in kube-system/aws-auth (kubectl -n kube-system edit configmap aws-auth):\n{}",
            entries.join("\n")
        ),
    )
}

/// The roles `mapRoles` (aws-auth's YAML list) does not map to the group.
fn unmapped(map_roles: &str, role_arns: &[String]) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Mapping {
        #[serde(default)]
        rolearn: String,
        #[serde(default)]
        groups: Vec<String>,
    }
    let mapped: Vec<Mapping> = serde_yaml_ng::from_str(map_roles).unwrap_or_default();
    role_arns
        .iter()
        .filter(|arn| !mapped.iter().any(|m| m.rolearn == **arn && m.groups.iter().any(|g| g == FUNCTIONS_GROUP)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_follow_the_pools_namespaces_and_priority_classes() {
        let config = Config::from_yaml(include_str!("../../../../../ballast.example.yaml")).unwrap();
        let said: Vec<String> = needs(&config).iter().map(ToString::to_string).collect();
        for want in [
            "patch nodes",
            "create pods/eviction",
            "get priorityclasses ballast-headroom",
            "patch deployments ballast-headroom-general in ballast-headroom",
            "get deployments ballast-headroom-general-3 in ballast-headroom",
            "patch deployments ballast-headroom-batch-2 in ballast-headroom",
            "create deployments in ballast-headroom",
        ] {
            assert!(said.contains(&want.to_string()), "{want} not in {said:?}");
        }
        // `shapes: fixed` runs one Deployment: only its name is needed.
        let mut fixed = config.clone();
        for pool in &mut fixed.pools {
            pool.headroom.shapes = ballast_core::config::HeadroomShapes::Fixed;
        }
        let said: Vec<String> = needs(&fixed).iter().map(ToString::to_string).collect();
        assert!(said.contains(&"get deployments ballast-headroom-general in ballast-headroom".to_string()));
        assert!(!said.iter().any(|n| n.contains("ballast-headroom-general-2")), "{said:?}");
    }

    #[test]
    fn aws_auth_counts_a_role_mapped_to_the_group_only() {
        let roles = vec!["arn:aws:iam::1:role/a".to_string(), "arn:aws:iam::1:role/b".to_string()];
        let map = "- rolearn: arn:aws:iam::1:role/a\n  username: x\n  groups: [ballast:functions]\n- rolearn: arn:aws:iam::1:role/b\n  groups: [system:masters]\n";
        assert_eq!(unmapped(map, &roles), vec!["arn:aws:iam::1:role/b".to_string()]);
        assert_eq!(unmapped("not: [yaml", &roles), roles, "an unreadable mapRoles maps nothing");
    }
}
