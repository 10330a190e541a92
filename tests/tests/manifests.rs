//! `infra/k8s` is a kustomize base: rendered by Debian's kubectl 1.20 (`kubectl
//! kustomize`), alone and under an overlay that sets the image, the event bus and the
//! config parameter's name, and the overlay's output is applied to a real API server
//! (validation and admission). The forwarder's ServiceAccount can watch pods and nodes but
//! change nothing. The namespaces enforce the `restricted` Pod Security Standard, and the
//! pods Ballast runs there (the forwarder; the pause pods the functions apply, in a
//! namespace of their own under a quota) meet it as the server stores them. The
//! forwarder's pods carry Prometheus's scrape annotations for the port it serves `/metrics`
//! on, its image is pinned by digest, and a NetworkPolicy lets it reach only what it calls.
//! The headroom admission policy (Kubernetes 1.30+, not applied here) is evaluated with a
//! CEL interpreter against the pause pods the functions make and against forbidden ones.
//! The optional monitoring kustomization (infra/k8s/monitoring) renders beside the base,
//! scrapes the Service the base makes, and its alerts and dashboard query only metrics the
//! forwarder exports.

use std::collections::BTreeSet;
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

const IMAGE: &str = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/ballast-forwarder@sha256:1111111111111111111111111111111111111111111111111111111111111111";
const BUS: &str = "ballast-prod-eks";
const CONFIG_PARAMETER: &str = "/ballast/prod-eks/config";

/// An overlay as the getting-started page shows it, over a copy of the base (kustomize 2 loads only
/// files under a kustomization's own directory).
fn overlay(root: &Path) -> std::path::PathBuf {
    copy_tree(&ballast_tests::repo_root().join("infra/k8s"), &root.join("base"));
    let dir = root.join("prod");
    std::fs::create_dir_all(&dir).unwrap();
    // kustomize 2 cannot re-pin a digest through `images:`: the image goes in a patch.
    let image = format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: ballast-forwarder
  namespace: ballast
spec:
  template:
    spec:
      containers:
        - name: forwarder
          image: {IMAGE}
"
    );
    std::fs::write(dir.join("image.yaml"), image).unwrap();
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
bases:
  - ../base
patchesStrategicMerge:
  - image.yaml
configMapGenerator:
  - name: ballast-forwarder-settings
    namespace: ballast
    behavior: merge
    literals:
      - BALLAST_EVENT_BUS={BUS}
      - BALLAST_CONFIG_PARAMETER={CONFIG_PARAMETER}
"
    );
    std::fs::write(dir.join("kustomization.yaml"), kustomization).unwrap();
    dir
}

/// `from` copied into `to`, subdirectories (`monitoring/`) too.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, target).unwrap();
        }
    }
}

fn find<'a>(objects: &'a [Value], kind: &str, name_prefix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with(name_prefix)))
        .unwrap_or_else(|| panic!("no {kind} {name_prefix}* in {objects:#?}"))
}

/// The forwarder's Deployment reads the generated settings by their hashed name (the
/// config from the SSM parameter they name, no copy of it in the cluster), and its scrape
/// annotations name the port its container serves and its settings bind.
fn check_wiring(objects: &[Value]) -> (Value, Value) {
    let deployment = find(objects, "Deployment", "ballast-forwarder").clone();
    let settings = find(objects, "ConfigMap", "ballast-forwarder-settings").clone();
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["envFrom"][0]["configMapRef"]["name"], settings["metadata"]["name"]);
    assert_ne!(
        settings["metadata"]["name"], "ballast-forwarder-settings",
        "a generated name (with its hash) rolls the pods"
    );
    let parameter = settings["data"]["BALLAST_CONFIG_PARAMETER"].as_str().expect("the config parameter's name");
    assert!(parameter.starts_with('/'), "{parameter}");
    let configs: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            o["kind"] == "ConfigMap" && o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("ballast-config"))
        })
        .collect();
    assert!(configs.is_empty(), "a second copy of the config in the cluster: {configs:?}");
    assert!(pod["spec"]["volumes"].is_null(), "no config volume: {}", pod["spec"]["volumes"]);
    assert!(container["env"].as_array().into_iter().flatten().all(|e| e["name"] != "BALLAST_CONFIG_FILE"));
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
    // The pods carry the scrape annotations; the Service too would have scrape configs
    // that follow both pods and service endpoints scrape the forwarder twice.
    assert!(service["metadata"]["annotations"].get("prometheus.io/scrape").is_none(), "{service:#}");
    check_network_policy(objects, port);
    (deployment, settings)
}

/// Default deny in `ballast`, and the forwarder's own way out: DNS, HTTPS (the API server,
/// EventBridge, SSM, STS), the Pod Identity agent; in: its metrics port.
fn check_network_policy(objects: &[Value], port: u16) {
    let policies: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "NetworkPolicy").collect();
    let deny = policies.iter().find(|p| p["spec"]["podSelector"] == json!({}));
    let deny = deny.unwrap_or_else(|| panic!("no default-deny NetworkPolicy: {policies:#?}"));
    assert_eq!(deny["metadata"]["namespace"], "ballast");
    assert_eq!(deny["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert!(deny["spec"]["ingress"].is_null() && deny["spec"]["egress"].is_null(), "{deny}");
    let forwarder = policies
        .iter()
        .find(|p| p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "forwarder")
        .expect("the forwarder's NetworkPolicy");
    let rules = |key: &str| forwarder["spec"][key].as_array().cloned().unwrap_or_default();
    let allows_port = |rule: &Value, port: u16, protocol: &str| {
        rule["ports"].as_array().into_iter().flatten().any(|p| p["port"] == port && p["protocol"] == protocol)
    };
    let egress = rules("egress");
    let anywhere = |r: &Value| r["to"].is_null();
    for (what, ok) in [
        ("DNS over UDP", egress.iter().any(|r| allows_port(r, 53, "UDP"))),
        ("DNS over TCP", egress.iter().any(|r| allows_port(r, 53, "TCP"))),
        ("HTTPS to the API server and AWS", egress.iter().any(|r| anywhere(r) && allows_port(r, 443, "TCP"))),
        (
            "the Pod Identity agent",
            egress.iter().any(|r| {
                allows_port(r, 80, "TCP")
                    && r["to"].as_array().into_iter().flatten().any(|t| t["ipBlock"]["cidr"] == "169.254.170.23/32")
            }),
        ),
        ("its metrics, in", rules("ingress").iter().any(|r| allows_port(r, port, "TCP"))),
    ] {
        assert!(ok, "the forwarder's NetworkPolicy does not allow {what}: {forwarder}");
    }
    // Nothing else goes anywhere: every other egress rule names its destination.
    let open: Vec<&Value> = egress.iter().filter(|r| anywhere(r) && !allows_port(r, 443, "TCP")).collect();
    assert!(open.is_empty(), "egress open beyond HTTPS: {open:?}");
}

#[tokio::test]
async fn the_kustomize_base_renders_applies_and_the_forwarder_is_read_only() {
    let Some(kubectl) = kubectl() else { return };
    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    let admin = plane.client(ADMIN_TOKEN);

    // The base alone: a placeholder parameter name, the published image pinned by digest.
    let base = kustomize(&kubectl, &ballast_tests::repo_root().join("infra/k8s"));
    let (deployment, _) = check_wiring(&base);
    let image = deployment["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap().to_string();
    let digest = image.strip_prefix("ghcr.io/ballast-dev/ballast-forwarder@sha256:").unwrap_or_default();
    assert!(digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()), "not pinned by digest: {image}");

    // An overlay sets the image, the event bus and the config parameter; the rest stays.
    let tmp = std::env::temp_dir().join(format!("ballast-kustomize-{}", std::process::id()));
    let rendered = kustomize(&kubectl, &overlay(&tmp));
    let (deployment, settings) = check_wiring(&rendered);
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], IMAGE);
    assert_eq!(settings["data"]["BALLAST_EVENT_BUS"], BUS);
    assert_eq!(settings["data"]["BALLAST_CONFIG_PARAMETER"], CONFIG_PARAMETER);
    assert_eq!(settings["data"]["BALLAST_DEBOUNCE"], "30s", "merged, not replaced");
    let _ = std::fs::remove_dir_all(&tmp);
    check_headroom_quota(&rendered);

    // Everything the overlay renders, applied for real.
    let applied = apply_objects(&admin, &rendered, false).await;
    let kinds: Vec<&str> = applied.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "Namespace",
        "ResourceQuota",
        "PriorityClass",
        "ClusterRole",
        "RoleBinding",
        "ConfigMap",
        "Service",
        "Deployment",
        "NetworkPolicy",
    ] {
        assert!(kinds.contains(&kind), "{kind} not applied: {kinds:?}");
    }
    let stored = Api::<Deployment>::namespaced(admin.clone(), "ballast").get("ballast-forwarder").await.unwrap();
    let spec = serde_json::to_value(stored.spec.unwrap().template.spec.unwrap()).unwrap();
    let wrong = restricted_violations(&spec);
    assert!(wrong.is_empty(), "the forwarder breaks the restricted standard: {wrong:?}");
    for name in ["ballast", "ballast-headroom"] {
        let namespace = Api::<Namespace>::all(admin.clone()).get(name).await.unwrap();
        let labels = namespace.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("pod-security.kubernetes.io/enforce").map(String::as_str), Some("restricted"), "{name}");
    }

    // The pause pods, as the functions apply them (their group, their RBAC).
    let mut pool = ballast_tests::example_config().pools.remove(0);
    pool.headroom.pod_cpu_millis = 100;
    let connector = Connector::fixed(plane.kube_config(FUNCTIONS_TOKEN)).expect("connector");
    let cluster = KubeCluster::new(connector, std::slice::from_ref(&pool));
    cluster.set_headroom(&pool, 0, &pool.headroom.unit_shape(), 1).await.unwrap();
    // A second slot, of a GPU shape: the functions' RBAC names every slot of the pool.
    let mut gpu = ballast_core::shape::PodShape::new(100, 1 << 30);
    gpu.extended.insert("nvidia.com/gpu".into(), 1);
    cluster.set_headroom(&pool, 1, &gpu, 1).await.unwrap();
    assert_eq!(pool.headroom.namespace, "ballast-headroom");
    for name in ["ballast-headroom-general", "ballast-headroom-general-2"] {
        let headroom = Api::<Deployment>::namespaced(admin.clone(), "ballast-headroom").get(name).await.unwrap();
        let spec = serde_json::to_value(headroom.spec.unwrap().template.spec.unwrap()).unwrap();
        let wrong = restricted_violations(&spec);
        assert!(wrong.is_empty(), "the pause pods of {name} break the restricted standard: {wrong:?}");
    }

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

/// The headroom namespace's quota leaves room for every pool of the example config at its
/// headroom `max`, and bounds what pause pods can take. `max` is room in pause pods of
/// `pod_cpu` / `pod_memory` and bounds the pause pods of every shape together; held in
/// other shapes, each slot rounds up to whole pods, which the quota's margin covers.
fn check_headroom_quota(objects: &[Value]) {
    let quota = objects
        .iter()
        .find(|o| o["kind"] == "ResourceQuota" && o["metadata"]["namespace"] == "ballast-headroom")
        .expect("a ResourceQuota in ballast-headroom");
    let hard = &quota["spec"]["hard"];
    let config = ballast_tests::example_config();
    let pods: u64 = config.pools.iter().map(|p| u64::from(p.headroom.max)).sum();
    let cpu: u64 = config.pools.iter().map(|p| u64::from(p.headroom.max) * p.headroom.pod_cpu_millis).sum();
    let memory: u64 = config.pools.iter().map(|p| u64::from(p.headroom.max) * p.headroom.pod_memory_bytes).sum();
    let quantity = |key: &str| -> f64 {
        let q = hard[key].as_str().unwrap_or_else(|| panic!("quota without {key}: {hard}"));
        let (number, factor) = match q {
            q if q.ends_with("Gi") => (&q[..q.len() - 2], f64::from(1u32 << 30)),
            q if q.ends_with('m') => (&q[..q.len() - 1], 0.001),
            q => (q, 1.0),
        };
        number.parse::<f64>().unwrap() * factor
    };
    assert!(quantity("pods") >= pods as f64, "pods {} < {pods}", hard["pods"]);
    assert!(quantity("requests.cpu") * 1000.0 >= cpu as f64, "requests.cpu {} < {cpu}m", hard["requests.cpu"]);
    assert!(quantity("requests.memory") >= memory as f64, "requests.memory {} < {memory}", hard["requests.memory"]);
}

#[test]
fn headroom_lives_by_default_in_its_own_namespace_which_the_functions_rbac_covers() {
    // A pool that names no namespace: its pause pods are not beside the forwarder, whose
    // service account (and AWS role) a Deployment there could use.
    let example = std::fs::read_to_string(ballast_tests::repo_root().join("ballast.example.yaml")).unwrap();
    let config = Config::from_yaml(&example.replace("      namespace: ballast-headroom\n", "")).unwrap();
    assert!(config.pools.iter().all(|p| p.headroom.namespace == "ballast-headroom"));
    let rbac = std::fs::read_to_string(ballast_tests::repo_root().join("infra/k8s/functions-rbac.yaml")).unwrap();
    let roles: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&rbac)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|o| o["kind"] == "Role" || o["kind"] == "RoleBinding")
        .collect();
    assert_eq!(roles.len(), 2, "{roles:?}");
    for o in roles {
        assert_eq!(o["metadata"]["namespace"], "ballast-headroom", "{o}");
    }
}

/// A change to a pod spec that the admission policy must refuse.
type Change = Box<dyn Fn(&mut Value)>;

/// The messages of the headroom admission policy's validations that `object` fails, its
/// variables and validations evaluated in order as the API server does (an evaluation
/// error denies too: failurePolicy Fail).
fn admission_failures(object: &Value) -> Vec<String> {
    use cel_interpreter::{Context, Program};
    let text =
        std::fs::read_to_string(ballast_tests::repo_root().join("infra/k8s/headroom-admission-policy.yaml")).unwrap();
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .collect();
    let policy = docs.iter().find(|d| d["kind"] == "ValidatingAdmissionPolicy").expect("the policy");
    let mut context = Context::default();
    context.add_variable("object", object).unwrap();
    let mut variables = serde_json::Map::new();
    for v in policy["spec"]["variables"].as_array().into_iter().flatten() {
        context.add_variable("variables", Value::Object(variables.clone())).unwrap();
        let expression = v["expression"].as_str().unwrap();
        let program = Program::compile(expression).unwrap_or_else(|e| panic!("{expression}: {e}"));
        match program.execute(&context) {
            Ok(value) => {
                variables.insert(v["name"].as_str().unwrap().to_string(), value.json().unwrap());
            }
            Err(e) => return vec![format!("variable {}: {e}", v["name"])],
        }
    }
    context.add_variable("variables", Value::Object(variables)).unwrap();
    let mut failed = Vec::new();
    for v in policy["spec"]["validations"].as_array().into_iter().flatten() {
        let expression = v["expression"].as_str().unwrap();
        let program = Program::compile(expression).unwrap_or_else(|e| panic!("{expression}: {e}"));
        match program.execute(&context) {
            Ok(cel_interpreter::Value::Bool(true)) => {}
            Ok(other) => failed.push(format!("{} ({other:?})", v["message"].as_str().unwrap_or(expression))),
            Err(e) => failed.push(format!("{} (error: {e})", v["message"].as_str().unwrap_or(expression))),
        }
    }
    failed
}

#[test]
fn the_headroom_admission_policy_admits_the_pause_pods_and_nothing_else() {
    let text =
        std::fs::read_to_string(ballast_tests::repo_root().join("infra/k8s/headroom-admission-policy.yaml")).unwrap();
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .collect();
    let policy = docs.iter().find(|d| d["kind"] == "ValidatingAdmissionPolicy").expect("the policy");
    let binding = docs.iter().find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding").expect("its binding");
    assert!(docs.iter().all(|d| d["apiVersion"] == "admissionregistration.k8s.io/v1"), "GA only");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    // Not in the base: the test API server (1.20) and clusters before 1.30 refuse the kind.
    let kustomization =
        std::fs::read_to_string(ballast_tests::repo_root().join("infra/k8s/kustomization.yaml")).unwrap();
    assert!(!kustomization.lines().any(|l| l.trim() == "- headroom-admission-policy.yaml"));

    let config = ballast_tests::example_config();
    let mut checked = 0;
    for pool in &config.pools {
        let selector = &policy["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"];
        assert_eq!(selector["kubernetes.io/metadata.name"], pool.headroom.namespace.as_str());
        // As the functions make them: the Deployment, and a pod of its template.
        let deployment =
            serde_json::to_value(ballast_kube::headroom::deployment(pool, 0, &pool.headroom.unit_shape(), 2)).unwrap();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "pause", "namespace": pool.headroom.namespace },
            "spec": deployment["spec"]["template"]["spec"],
        });
        for (what, object) in [("Deployment", &deployment), ("Pod", &pod)] {
            let failed = admission_failures(object);
            assert!(failed.is_empty(), "pool {}: its pause {what} is refused: {failed:#?}", pool.name);
            let spec = if what == "Pod" { "/spec" } else { "/spec/template/spec" };
            let forbidden: Vec<(&str, &str, Change)> = vec![
                (
                    "another image",
                    "only the configured pause image",
                    Box::new(|s| {
                        s["containers"][0]["image"] = json!("ghcr.io/ballast-dev/ballast-forwarder@sha256:0000000000000000000000000000000000000000000000000000000000000000")
                    }),
                ),
                (
                    "the pause image by tag",
                    "only the configured pause image",
                    Box::new(|s| s["containers"][0]["image"] = json!("registry.k8s.io/pause:3.10")),
                ),
                (
                    "a second container",
                    "only the configured pause image",
                    Box::new(|s| {
                        let mut second = s["containers"][0].clone();
                        second["name"] = json!("shell");
                        second["image"] = json!("busybox");
                        s["containers"].as_array_mut().unwrap().push(second);
                    }),
                ),
                (
                    "a service-account token",
                    "no service-account token",
                    Box::new(|s| {
                        s["automountServiceAccountToken"] = json!(true);
                        s["serviceAccountName"] = json!("ballast-forwarder");
                    }),
                ),
                (
                    "the default token mount",
                    "no service-account token",
                    Box::new(|s| {
                        s.as_object_mut().unwrap().remove("automountServiceAccountToken");
                    }),
                ),
                (
                    "an init container",
                    "no init or ephemeral containers",
                    Box::new(|s| s["initContainers"] = json!([{ "name": "init", "image": "busybox" }])),
                ),
                (
                    "a volume",
                    "no volumes",
                    Box::new(|s| s["volumes"] = json!([{ "name": "token", "secret": { "secretName": "x" } }])),
                ),
                (
                    "another PriorityClass",
                    "headroom PriorityClass",
                    Box::new(|s| s["priorityClassName"] = json!("system-cluster-critical")),
                ),
            ];
            for (change, message, apply) in forbidden {
                let mut bad = object.clone();
                apply(bad.pointer_mut(spec).unwrap());
                let failed = admission_failures(&bad);
                assert!(
                    failed.iter().any(|f| f.contains(message)),
                    "pool {}: a {what} with {change} is admitted or refused for another reason: {failed:#?}",
                    pool.name
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 8 * 2 * config.pools.len());
    // Another slot, of a GPU shape, is a pause Deployment like the first.
    let pool = &config.pools[0];
    let mut gpu = ballast_core::shape::PodShape::new(4000, 14 << 30);
    gpu.extended.insert("nvidia.com/gpu".into(), 1);
    let deployment = serde_json::to_value(ballast_kube::headroom::deployment(pool, 1, &gpu, 2)).unwrap();
    let failed = admission_failures(&deployment);
    assert!(failed.is_empty(), "a GPU slot's Deployment is refused: {failed:#?}");
}

/// What the forwarder's `/metrics` may hold (each family's sample names, from its own
/// registry with a sample in every family), and Prometheus's `up` for its scrape.
fn exported_names() -> (BTreeSet<String>, Vec<String>) {
    let page = ballast_forwarder::metrics::example_page();
    let mut names = ballast_forwarder::metrics::sample_names(&page);
    names.insert("up".to_string());
    let families = page.lines().filter_map(|l| Some(l.strip_prefix("# TYPE ")?.split_once(' ')?.0.to_string()));
    (names, families.collect())
}

/// Every query of a Grafana dashboard: its panels' (rows' too) targets and its variables'.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    fn panels<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            panels(&panel["panels"], out);
        }
    }
    let mut all = Vec::new();
    panels(&dashboard["panels"], &mut all);
    let mut queries: Vec<String> = all
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if variable["type"] == "query" {
            let query = variable["query"]["query"].as_str().or(variable["query"].as_str());
            queries.push(query.expect("a query variable has a query").to_string());
        }
    }
    queries
}

#[test]
fn the_monitoring_kustomization_queries_only_what_the_forwarder_exports() {
    use ballast_tests::promql::metric_names;
    let Some(kubectl) = kubectl() else { return };
    let tmp = std::env::temp_dir().join(format!("ballast-monitoring-{}", std::process::id()));
    copy_tree(&ballast_tests::repo_root().join("infra/k8s"), &tmp.join("base"));
    // As the kustomization's comment says: beside the base, in an overlay.
    let prod = tmp.join("prod");
    std::fs::create_dir_all(&prod).unwrap();
    std::fs::write(
        prod.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nbases:\n  - ../base\n  - ../base/monitoring\n",
    )
    .unwrap();
    let objects = kustomize(&kubectl, &prod);
    let alone = kustomize(&kubectl, &tmp.join("base/monitoring"));
    std::fs::remove_dir_all(&tmp).unwrap();
    assert_eq!(alone.len(), 3, "a ServiceMonitor, a PrometheusRule, a dashboard: {alone:#?}");
    for object in &alone {
        assert_eq!(object["metadata"]["namespace"], "ballast", "{object:#}");
        assert!(objects.contains(object), "rendered the same beside the base: {object:#}");
    }
    let (deployment, _) = check_wiring(&objects);

    // The ServiceMonitor scrapes the base's Service, on the port and path the pods serve.
    let service = find(&objects, "Service", "ballast-forwarder-metrics");
    let monitor = find(&objects, "ServiceMonitor", "ballast-forwarder");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    let selector = monitor["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels");
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(&service["metadata"]["labels"][key], value, "the Service carries {key}");
    }
    let namespaces = &monitor["spec"]["namespaceSelector"]["matchNames"];
    assert!(namespaces.as_array().unwrap().contains(&service["metadata"]["namespace"]), "{namespaces}");
    let endpoint = &monitor["spec"]["endpoints"][0];
    let ports = service["spec"]["ports"].as_array().unwrap();
    assert!(ports.iter().any(|p| p["name"] == endpoint["port"]), "{endpoint} names no port of {ports:?}");
    assert_eq!(endpoint["path"], deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"]);

    let (exported, families) = exported_names();
    // The alerts: each one's expression reads only exported names, and `up` or
    // `process_*` only joined with the forwarder's own series.
    let rule = find(&objects, "PrometheusRule", "ballast-forwarder");
    let mut alerted = BTreeSet::new();
    let mut alerts = Vec::new();
    for r in rule["spec"]["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()) {
        let alert = r["alert"].as_str().expect("alerting rules only");
        let expr = r["expr"].as_str().expect("an expression");
        assert!(["warning", "critical"].contains(&r["labels"]["severity"].as_str().unwrap_or_default()), "{alert}");
        assert!(r["annotations"]["summary"].is_string() && r["annotations"]["description"].is_string(), "{alert}");
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{alert} reads no metric: {expr}");
        for name in &names {
            assert!(exported.contains(name), "{alert} reads {name}, which the forwarder does not export: {expr}");
        }
        // However the forwarder is scraped (this ServiceMonitor, or the pods' prometheus.io
        // annotations under another job), the alerts must find it: no job is named.
        assert!(!expr.contains("job="), "{alert} names a scrape job: {expr}");
        for pattern in expr.split("pod=~\"").skip(1).filter_map(|rest| rest.split('"').next()) {
            let pods = format!("{}-.+", deployment["metadata"]["name"].as_str().unwrap());
            assert_eq!(pattern, pods, "{alert}: the forwarder's pods are named after its Deployment");
        }
        alerted.extend(names);
        alerts.push(alert.to_string());
    }
    // What the alerts must watch: down or not scraped, publish failures, drops, the watch
    // relisting in a loop, memory near the limit.
    for name in [
        "up",
        "ballast_forwarder_put_events_failed_calls_total",
        "ballast_forwarder_put_events_failed_entries_total",
        "ballast_forwarder_events_dropped_total",
        "ballast_forwarder_watch_relists_total",
        "process_resident_memory_bytes",
        "ballast_forwarder_memory_limit_bytes",
    ] {
        assert!(alerted.contains(name), "no alert reads {name}: {alerts:?}");
    }

    // The dashboard: in a ConfigMap Grafana's sidecar loads, every query on exported names,
    // and every family the forwarder exports shown somewhere.
    let config_map = find(&objects, "ConfigMap", "ballast-forwarder-dashboard");
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        config_map["metadata"]["name"], "ballast-forwarder-dashboard",
        "no hash: one dashboard, not one per edit"
    );
    let data = config_map["data"].as_object().unwrap();
    assert_eq!(data.len(), 1);
    let (file, text) = data.iter().next().unwrap();
    assert!(file.ends_with(".json"), "{file}");
    let dashboard: Value = serde_json::from_str(text.as_str().unwrap()).expect("the dashboard is JSON");
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()), "a fixed uid");
    let queries = dashboard_queries(&dashboard);
    let mut shown = BTreeSet::new();
    for query in &queries {
        let names = metric_names(query);
        assert!(!names.is_empty(), "a query of no metric: {query}");
        for name in &names {
            assert!(
                exported.contains(name),
                "the dashboard queries {name}, which the forwarder does not export: {query}"
            );
        }
        shown.extend(names);
    }
    for family in families.iter().filter(|f| f.starts_with("ballast_forwarder_")) {
        assert!(shown.iter().any(|n| n.starts_with(family.as_str())), "the dashboard shows no {family}");
    }
}
