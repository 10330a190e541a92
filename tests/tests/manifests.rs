//! Every manifest in `infra/k8s` is accepted by a real API server (validation and
//! admission, the forwarder's Deployment as a server-side dry run), and the forwarder's
//! ServiceAccount can watch pods and nodes but change nothing.

use ballast_tests::kube::{apply_manifests, apply_manifests_with, ControlPlane, Parts, ADMIN_TOKEN, FORWARDER_TOKEN};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;

#[tokio::test]
async fn the_manifests_apply_and_the_forwarder_is_read_only() {
    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(&admin, "functions-rbac.yaml", &["ClusterRole", "ClusterRoleBinding"]).await;
    apply_manifests(&admin, "forwarder.yaml", &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]).await;
    apply_manifests_with(&admin, "forwarder.yaml", &["Deployment"], true).await;

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
