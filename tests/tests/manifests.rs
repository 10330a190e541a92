//! Every manifest in `infra/k8s` is accepted by a real API server (validation and
//! admission, the forwarder's Deployment as a server-side dry run), and the forwarder's
//! ServiceAccount can watch pods and nodes but change nothing. The namespace enforces the
//! `restricted` Pod Security Standard, and the pods Ballast runs there (the forwarder, the
//! pause pods the functions apply) meet it as the server stores them.

use ballast_core::ports::Cluster;
use ballast_kube::{Connector, KubeCluster};
use ballast_tests::kube::{
    apply_manifests, apply_manifests_with, restricted_violations, ControlPlane, Parts, ADMIN_TOKEN, FORWARDER_TOKEN,
    FUNCTIONS_TOKEN,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;

#[tokio::test]
async fn the_manifests_apply_and_the_forwarder_is_read_only() {
    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(
        &admin,
        "functions-rbac.yaml",
        &["PriorityClass", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
    )
    .await;
    apply_manifests(&admin, "forwarder.yaml", &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]).await;
    let forwarder = apply_manifests_with(&admin, "forwarder.yaml", &["Deployment"], true).await;
    assert_eq!(forwarder.len(), 1);
    let wrong = restricted_violations(&forwarder[0]["spec"]["template"]["spec"]);
    assert!(wrong.is_empty(), "the forwarder breaks the restricted standard: {wrong:?}");
    let namespace = Api::<Namespace>::all(admin.clone()).get("ballast").await.unwrap();
    let labels = namespace.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("pod-security.kubernetes.io/enforce").map(String::as_str), Some("restricted"));

    // The pause pods, as the functions apply them (their group, their RBAC).
    let mut pool = ballast_tests::example_config().pools.remove(0);
    pool.headroom.pod_cpu_millis = 100;
    let connector = Connector::fixed(plane.kube_config(FUNCTIONS_TOKEN)).expect("connector");
    KubeCluster::new(connector, std::slice::from_ref(&pool)).set_headroom_replicas(&pool, 1).await.unwrap();
    let headroom =
        Api::<Deployment>::namespaced(admin.clone(), "ballast").get("ballast-headroom-general").await.unwrap();
    let spec = serde_json::to_value(headroom.spec.unwrap().template.spec.unwrap()).unwrap();
    let wrong = restricted_violations(&spec);
    assert!(wrong.is_empty(), "the pause pods break the restricted standard: {wrong:?}");

    let forwarder = plane.client(FORWARDER_TOKEN);
    Api::<Pod>::all(forwarder.clone()).list(&ListParams::default()).await.expect("list pods");
    Api::<Node>::all(forwarder.clone()).list(&ListParams::default()).await.expect("list nodes");
    let denied = |e: kube::Error| matches!(e, kube::Error::Api(ref s) if s.code == 403);
    let cordon = json!({ "spec": { "unschedulable": true } });
    let patch = Api::<Node>::all(forwarder.clone()).patch("any", &PatchParams::default(), &Patch::Merge(&cordon)).await;
    assert!(patch.is_err_and(denied), "the forwarder cannot change nodes");
    let secrets = Api::<Secret>::all(forwarder).list(&ListParams::default()).await;
    assert!(secrets.is_err_and(denied), "the forwarder cannot read secrets");
}
