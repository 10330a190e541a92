//! `infra/k8s` is a kustomize base: rendered by Debian's kubectl 1.20 (`kubectl
//! kustomize`), alone and under an overlay that sets the image, the event bus and the
//! config, and the overlay's output is applied to a real API server (validation and
//! admission). The forwarder's ServiceAccount can watch pods and nodes but change nothing.
//! The namespace enforces the `restricted` Pod Security Standard, and the pods Ballast runs
//! there (the forwarder, the pause pods the functions apply) meet it as the server stores
//! them. The forwarder's pods carry Prometheus's scrape annotations for the port it serves
//! `/metrics` on.

use std::path::Path;

use ballast_core::config::Config;
use ballast_core::ports::Cluster;
use ballast_kube::{Connector, KubeCluster};
use ballast_tests::kube::{
    apply_objects, kubectl, kustomize, restricted_violations, ControlPlane, Parts, ADMIN_TOKEN, FORWARDER_TOKEN,
    FUNCTIONS_TOKEN,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

const IMAGE: &str = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/ballast-forwarder";
const BUS: &str = "ballast-prod-eks";

/// An overlay as the README shows it, over a copy of the base (kustomize 2 loads only
/// files under a kustomization's own directory).
fn overlay(root: &Path) -> std::path::PathBuf {
    let base = root.join("base");
    std::fs::create_dir_all(&base).unwrap();
    for entry in std::fs::read_dir(ballast_tests::repo_root().join("infra/k8s")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, base.join(path.file_name().unwrap())).unwrap();
    }
    let dir = root.join("prod");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(ballast_tests::repo_root().join("ballast.example.yaml"), dir.join("ballast.yaml")).unwrap();
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
bases:
  - ../base
images:
  - name: ghcr.io/ballast-dev/ballast-forwarder
    newName: {IMAGE}
    newTag: 0.2.0
configMapGenerator:
  - name: ballast-forwarder-settings
    namespace: ballast
    behavior: merge
    literals:
      - BALLAST_EVENT_BUS={BUS}
  - name: ballast-config
    namespace: ballast
    behavior: replace
    files:
      - ballast.yaml
"
    );
    std::fs::write(dir.join("kustomization.yaml"), kustomization).unwrap();
    dir
}

fn find<'a>(objects: &'a [Value], kind: &str, name_prefix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with(name_prefix)))
        .unwrap_or_else(|| panic!("no {kind} {name_prefix}* in {objects:#?}"))
}

/// The forwarder's Deployment reads the generated ConfigMaps by their hashed names, and
/// its scrape annotations name the port its container serves and its settings bind.
fn check_wiring(objects: &[Value]) -> (Value, Value, Value) {
    let deployment = find(objects, "Deployment", "ballast-forwarder").clone();
    let settings = find(objects, "ConfigMap", "ballast-forwarder-settings").clone();
    let config = find(objects, "ConfigMap", "ballast-config").clone();
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["envFrom"][0]["configMapRef"]["name"], settings["metadata"]["name"]);
    let volume = pod["spec"]["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "config").unwrap();
    assert_eq!(volume["configMap"]["name"], config["metadata"]["name"]);
    assert_ne!(config["metadata"]["name"], "ballast-config", "a generated name (with its hash) rolls the pods");
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    let port: u16 = annotations["prometheus.io/port"].as_str().unwrap().parse().unwrap();
    assert!(container["ports"].as_array().unwrap().iter().any(|p| p["containerPort"] == port), "{container}");
    let bind = settings["data"]["BALLAST_HEALTH_ADDR"].as_str().unwrap();
    assert!(bind.ends_with(&format!(":{port}")), "the forwarder binds {bind}, the annotation says {port}");
    // Off spot where it can be: the preference excludes both spot labels.
    let preferred = &pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    let off_spot: Vec<(String, String)> = preferred
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["preference"]["matchExpressions"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["operator"] == "NotIn")
        .flat_map(|e| {
            let key = e["key"].as_str().unwrap_or_default().to_string();
            e["values"].as_array().cloned().unwrap_or_default().into_iter().map(move |v| (key.clone(), v.to_string()))
        })
        .collect();
    for (key, value) in [("eks.amazonaws.com/capacityType", "\"SPOT\""), ("karpenter.sh/capacity-type", "\"spot\"")] {
        assert!(off_spot.contains(&(key.to_string(), value.to_string())), "{key} {value} not avoided: {preferred}");
    }
    // An IPv6 cluster's kubelet probes the pod's IPv6 address.
    let bind: std::net::SocketAddr = bind.parse().unwrap();
    assert!(bind.ip() == std::net::Ipv6Addr::UNSPECIFIED, "{bind} takes no IPv6 probe");
    let service = find(objects, "Service", "ballast-forwarder-metrics");
    assert_eq!(service["spec"]["ports"][0]["port"], port);
    Config::from_yaml(config["data"]["ballast.yaml"].as_str().unwrap()).expect("the rendered config is valid");
    (deployment, settings, config)
}

#[tokio::test]
async fn the_kustomize_base_renders_applies_and_the_forwarder_is_read_only() {
    let Some(kubectl) = kubectl() else { return };
    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    let admin = plane.client(ADMIN_TOKEN);

    // The base alone: a placeholder config, the published image.
    let base = kustomize(&kubectl, &ballast_tests::repo_root().join("infra/k8s"));
    let (deployment, _, _) = check_wiring(&base);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/ballast-dev/ballast-forwarder:0.1.0"
    );

    // An overlay sets the image, the event bus and the config; the rest of the settings stay.
    let tmp = std::env::temp_dir().join(format!("ballast-kustomize-{}", std::process::id()));
    let rendered = kustomize(&kubectl, &overlay(&tmp));
    let (deployment, settings, config) = check_wiring(&rendered);
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], format!("{IMAGE}:0.2.0"));
    assert_eq!(settings["data"]["BALLAST_EVENT_BUS"], BUS);
    assert_eq!(settings["data"]["BALLAST_DEBOUNCE"], "30s", "merged, not replaced");
    let example = std::fs::read_to_string(ballast_tests::repo_root().join("ballast.example.yaml")).unwrap();
    assert_eq!(config["data"]["ballast.yaml"], example.as_str());
    let _ = std::fs::remove_dir_all(&tmp);

    // Everything the overlay renders, applied for real.
    let applied = apply_objects(&admin, &rendered, false).await;
    let kinds: Vec<&str> = applied.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in ["Namespace", "PriorityClass", "ClusterRole", "RoleBinding", "ConfigMap", "Service", "Deployment"] {
        assert!(kinds.contains(&kind), "{kind} not applied: {kinds:?}");
    }
    let stored = Api::<Deployment>::namespaced(admin.clone(), "ballast").get("ballast-forwarder").await.unwrap();
    let spec = serde_json::to_value(stored.spec.unwrap().template.spec.unwrap()).unwrap();
    let wrong = restricted_violations(&spec);
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
