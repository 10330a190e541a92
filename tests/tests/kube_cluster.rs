//! The cluster adapter against a real kube-apiserver v1.20.2 (+ scheduler and
//! controller-manager), acting as the Lambda functions' group with the RBAC of
//! `infra/k8s/functions-rbac.yaml`.

use std::time::Duration;

use ballast_core::config::{HeadroomShapes, PoolConfig};
use ballast_core::ports::{Cluster, ErrorKind};
use ballast_core::shape::{PodShape, SlotState};
use ballast_kube::{Connector, KubeCluster};
use ballast_tests::kube::{
    add_node, apply_manifests, eventually, mark_running, ControlPlane, Parts, ADMIN_TOKEN, FUNCTIONS_TOKEN,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

fn pool() -> PoolConfig {
    let mut config = ballast_tests::example_config();
    let mut pool = config.pools.remove(0);
    pool.headroom.pod_cpu_millis = 1500;
    pool.headroom.pod_memory_bytes = 1 << 30;
    pool
}

/// The control plane with the namespace and the functions' RBAC applied, and the
/// adapter connected as the functions' group.
async fn setup(parts: Parts) -> Option<(ControlPlane, kube::Client, KubeCluster)> {
    let plane = ControlPlane::start(parts).await?;
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(
        &admin,
        "functions-rbac.yaml",
        &["PriorityClass", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
    )
    .await;
    let connector = Connector::fixed(plane.kube_config(FUNCTIONS_TOKEN)).expect("connector");
    let cluster = KubeCluster::new(connector, &[pool()]).with_drain_poll(Duration::from_millis(250));
    Some((plane, admin, cluster))
}

async fn create_pod(admin: &kube::Client, namespace: &str, spec: serde_json::Value) -> Pod {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let pod: Pod = serde_json::from_value(spec).expect("pod");
    pods.create(&PostParams::default(), &pod).await.expect("create pod")
}

fn workload(name: &str, cpu: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut pod = json!({
        "metadata": { "name": name, "labels": { "app": "web" } },
        "spec": {
            "containers": [{ "name": "app", "image": "app:1", "resources": { "requests": { "cpu": cpu, "memory": "256Mi" } } }],
            "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "general", "effect": "NoSchedule" }],
            "nodeSelector": { "ballast.io/pool": "general" },
        },
    });
    merge(&mut pod, extra);
    pod
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The pool's slot 0 as `headroom` reads it: its shape and replicas.
async fn first_slot(cluster: &KubeCluster, pool: &PoolConfig) -> Option<(PodShape, Option<u32>)> {
    let slots = cluster.headroom(pool).await.unwrap();
    slots.into_iter().find(|s| s.slot == 0).map(|s| (s.shape, s.replicas))
}

#[tokio::test]
async fn headroom_apply_is_idempotent_and_takes_back_fields_another_manager_changed() {
    let Some((_plane, admin, cluster)) = setup(Parts::ApiServer).await else { return };
    let pool = pool();
    let unit = pool.headroom.unit_shape();
    assert_eq!(cluster.headroom(&pool).await.unwrap(), vec![], "no Deployment yet");
    cluster.set_headroom(&pool, 0, &unit, 3).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "ballast-headroom");
    let first = deployments.get("ballast-headroom-general").await.unwrap();
    assert_eq!(first.spec.as_ref().unwrap().replicas, Some(3));
    let pc: Api<PriorityClass> = Api::all(admin.clone());
    let pc = pc.get("ballast-headroom").await.unwrap();
    assert_eq!((pc.value, pc.preemption_policy.as_deref()), (-10, Some("Never")));

    // The same reconcile again writes nothing.
    cluster.set_headroom(&pool, 0, &unit, 3).await.unwrap();
    let again = deployments.get("ballast-headroom-general").await.unwrap();
    assert_eq!(again.metadata.resource_version, first.metadata.resource_version, "no write when nothing differs");
    assert_eq!(first_slot(&cluster, &pool).await, Some((unit.clone(), Some(3))));

    // Someone scales Ballast's Deployment by hand and adds an annotation of their own.
    let by_hand = json!({ "metadata": { "annotations": { "team": "platform" } }, "spec": { "replicas": 9 } });
    let kubectl = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    deployments.patch("ballast-headroom-general", &kubectl, &Patch::Merge(&by_hand)).await.unwrap();
    // Ballast's apply of 4 conflicts on spec.replicas, takes it back, and leaves the rest.
    cluster.set_headroom(&pool, 0, &unit, 4).await.unwrap();
    let after = deployments.get("ballast-headroom-general").await.unwrap();
    assert_eq!(after.spec.as_ref().unwrap().replicas, Some(4));
    assert_eq!(after.metadata.annotations.as_ref().unwrap()["team"], "platform", "other managers' fields stay");
    let replicas_owner = after
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.fields_v1.as_ref().is_some_and(|f| f.0.to_string().contains("f:replicas")))
        .map(|m| m.manager.clone().unwrap_or_default())
        .collect::<Vec<_>>();
    assert_eq!(replicas_owner, vec!["ballast".to_string()], "ballast owns spec.replicas again");

    // A new image in the config: the Deployment reads with its shape but no replicas (due
    // for a write whatever the count), and is rewritten.
    let mut newer = pool.clone();
    newer.headroom.image = format!("{}-new", pool.headroom.image.split('@').next().unwrap());
    assert_eq!(first_slot(&cluster, &newer).await, Some((unit.clone(), None)));
    cluster.set_headroom(&newer, 0, &unit, 4).await.unwrap();
    assert_eq!(first_slot(&cluster, &newer).await, Some((unit.clone(), Some(4))));
    // Another shape in the same slot: read back as written.
    let bigger = PodShape::new(2000, 3 << 30);
    cluster.set_headroom(&newer, 0, &bigger, 2).await.unwrap();
    assert_eq!(first_slot(&cluster, &newer).await, Some((bigger, Some(2))));
}

#[tokio::test]
async fn a_gpu_slot_is_applied_beside_the_first_and_read_back_with_its_shape() {
    let Some((_plane, admin, cluster)) = setup(Parts::ApiServer).await else { return };
    let pool = pool();
    let unit = pool.headroom.unit_shape();
    let mut gpu = PodShape::new(4000, 14 << 30);
    gpu.extended.insert("nvidia.com/gpu".into(), 1);
    cluster.set_headroom(&pool, 0, &unit, 3).await.unwrap();
    cluster.set_headroom(&pool, 1, &gpu, 2).await.unwrap();
    assert_eq!(
        cluster.headroom(&pool).await.unwrap(),
        vec![
            SlotState { slot: 0, shape: unit.clone(), replicas: Some(3) },
            SlotState { slot: 1, shape: gpu.clone(), replicas: Some(2) },
        ]
    );
    // As the API server stores it: the GPU in requests and limits, each slot its own pods.
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "ballast-headroom");
    let stored = deployments.get("ballast-headroom-general-2").await.unwrap();
    let spec = stored.spec.unwrap();
    let resources = spec.template.spec.unwrap().containers[0].resources.clone().unwrap();
    assert_eq!(resources.requests.as_ref().unwrap()["nvidia.com/gpu"].0, "1");
    assert_eq!(resources.limits.as_ref().unwrap()["nvidia.com/gpu"].0, "1");
    assert_eq!(spec.selector.match_labels.unwrap()["ballast.io/headroom-slot"], "1");
    let first = deployments.get("ballast-headroom-general").await.unwrap();
    assert_eq!(first.spec.unwrap().replicas, Some(3), "the first slot is left as it was");
    // Again, nothing differs: no write.
    let version = stored.metadata.resource_version;
    cluster.set_headroom(&pool, 1, &gpu, 2).await.unwrap();
    let again = deployments.get("ballast-headroom-general-2").await.unwrap();
    assert_eq!(again.metadata.resource_version, version);
}

#[tokio::test]
async fn each_slot_keeps_its_own_pods_though_the_first_slot_s_selector_matches_theirs() {
    // The first slot's selector is the one it had before slots (immutable), which the
    // other slots' pods match too: the ReplicaSets own their pods by controllerRef, so
    // neither Deployment takes or deletes the other's.
    let Some((_plane, admin, cluster)) = setup(Parts::WithControllers).await else { return };
    let pool = pool();
    cluster.set_headroom(&pool, 0, &pool.headroom.unit_shape(), 2).await.unwrap();
    cluster.set_headroom(&pool, 1, &PodShape::new(250, 256 << 20), 1).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "ballast-headroom");
    let of_slot = |slot: &'static str| {
        let pods = pods.clone();
        async move {
            let params = ListParams::default().labels(&format!("ballast.io/headroom-slot={slot}"));
            pods.list(&params).await.unwrap().items.len()
        }
    };
    eventually(Duration::from_secs(60), "two pause pods of slot 0, one of slot 1", || async {
        of_slot("0").await == 2 && of_slot("1").await == 1
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "ballast-headroom");
    let replicas = |name: &'static str| {
        let deployments = deployments.clone();
        async move { deployments.get(name).await.unwrap().status.and_then(|s| s.replicas) }
    };
    eventually(Duration::from_secs(60), "each Deployment counts its own pods", || async {
        replicas("ballast-headroom-general").await == Some(2) && replicas("ballast-headroom-general-2").await == Some(1)
    })
    .await;
    // A while later, still so: no controller fights over the pods.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!((of_slot("0").await, of_slot("1").await), (2, 1));
    assert_eq!(pods.list(&ListParams::default()).await.unwrap().items.len(), 3);
}

#[tokio::test]
async fn slots_past_the_config_are_read_where_rbac_lets_and_skipped_where_it_does_not() {
    let Some((plane, admin, cluster)) = setup(Parts::ApiServer).await else { return };
    // `auto` made a third slot; the config is now `fixed`: the slot is still read, so the
    // planner scales it to 0.
    let mut fixed = pool();
    fixed.headroom.shapes = HeadroomShapes::Fixed;
    let small = PodShape::new(250, 256 << 20);
    cluster.set_headroom(&pool(), 2, &small, 1).await.unwrap();
    assert_eq!(cluster.headroom(&fixed).await.unwrap(), vec![SlotState { slot: 2, shape: small, replicas: Some(1) }]);

    // A pool whose RBAC names only its one Deployment: the other slots' 403 is no error...
    let mut web = fixed.clone();
    web.name = "web".into();
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(admin.clone(), "ballast-headroom");
    let mut role = roles.get("ballast-functions-headroom").await.unwrap();
    role.rules.as_mut().unwrap()[0].resource_names.as_mut().unwrap().push("ballast-headroom-web".into());
    role.metadata.managed_fields = None;
    roles.replace("ballast-functions-headroom", &PostParams::default(), &role).await.unwrap();
    let connector = Connector::fixed(plane.kube_config(FUNCTIONS_TOKEN)).expect("connector");
    let cluster = KubeCluster::new(connector, &[web.clone()]);
    let unit = web.headroom.unit_shape();
    eventually(Duration::from_secs(10), "the Role's new name in force", || async {
        cluster.set_headroom(&web, 0, &unit, 1).await.is_ok()
    })
    .await;
    assert_eq!(cluster.headroom(&web).await.unwrap(), vec![SlotState { slot: 0, shape: unit, replicas: Some(1) }]);
    // ...nor one on a slot the config may use (RBAC from before shapes): the slot is
    // said to be forbidden, and the planner places no room there, rather than the
    // pool's whole reconcile failing.
    let mut auto = web.clone();
    auto.headroom.shapes = HeadroomShapes::Auto;
    assert_eq!(
        cluster.headroom(&auto).await.unwrap(),
        vec![
            SlotState { slot: 0, shape: web.headroom.unit_shape(), replicas: Some(1) },
            SlotState::forbidden(1),
            SlotState::forbidden(2),
        ]
    );
}

#[tokio::test]
async fn a_priority_class_with_another_value_is_reported_not_overwritten() {
    let Some((plane, admin, cluster)) = setup(Parts::ApiServer).await else { return };
    let existing: PriorityClass =
        serde_json::from_value(json!({ "metadata": { "name": "ballast-headroom" }, "value": -5 })).unwrap();
    let classes = Api::<PriorityClass>::all(admin);
    classes.delete("ballast-headroom", &Default::default()).await.unwrap();
    eventually(Duration::from_secs(10), "the shipped class gone", || async {
        classes.get_opt("ballast-headroom").await.unwrap().is_none()
    })
    .await;
    classes.create(&PostParams::default(), &existing).await.unwrap();
    let unit = pool().headroom.unit_shape();
    let err = cluster.set_headroom(&pool(), 0, &unit, 1).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Permanent);
    assert!(err.message.contains("exists with value -5") && err.message.contains("needs -10"), "{err}");

    // Missing altogether: the functions may not create it, and say who should.
    classes.delete("ballast-headroom", &Default::default()).await.unwrap();
    let fresh = KubeCluster::new(Connector::fixed(plane.kube_config(FUNCTIONS_TOKEN)).unwrap(), &[pool()]);
    let err = fresh.set_headroom(&pool(), 0, &unit, 1).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Permanent);
    assert!(err.message.contains("may not create it: apply infra/k8s/functions-rbac.yaml"), "{err}");
}

#[tokio::test]
async fn pause_pods_land_on_pool_nodes_and_a_workload_preempts_them() {
    let Some((_plane, admin, cluster)) = setup(Parts::WithControllers).await else { return };
    let pool = pool();
    add_node(&admin, "general-1", &[("ballast.io/pool", "general")], "4", "16Gi").await;
    add_node(&admin, "batch-1", &[("ballast.io/pool", "batch")], "8", "32Gi").await;
    cluster.set_headroom(&pool, 0, &pool.headroom.unit_shape(), 2).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "ballast-headroom");
    let pause = ListParams::default().labels("ballast.io/headroom=true");
    eventually(Duration::from_secs(60), "two pause pods bound to general-1", || async {
        let list = pods.list(&pause).await.unwrap();
        list.items.len() == 2
            && list.items.iter().all(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("general-1"))
    })
    .await;

    // 2 CPU of workload on a 4 CPU node holding 2 x 1.5 CPU of pause pods: one must go.
    create_pod(&admin, "default", workload("web-1", "2", json!({}))).await;
    let default_pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    eventually(Duration::from_secs(60), "the workload pod bound to general-1", || async {
        default_pods.get("web-1").await.unwrap().spec.unwrap().node_name.as_deref() == Some("general-1")
    })
    .await;
    eventually(Duration::from_secs(60), "one pause pod bound, its replacement unschedulable", || async {
        let list = pods.list(&pause).await.unwrap();
        let bound = list.items.iter().filter(|p| p.spec.as_ref().unwrap().node_name.is_some()).count();
        let unschedulable = list.items.iter().filter(|p| ballast_kube::pods::unschedulable_since(p).is_some()).count();
        bound == 1 && unschedulable == 1
    })
    .await;

    // Demand is the workload alone: pause pods are not demand.
    let demand = cluster.pool_demand(&pool, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!((demand.cpu_millis, demand.memory_bytes, demand.pods), (2000, 256 << 20, 1));
}

/// A pause pod may hold the room of several small pods (`in_fewer_pods`); the
/// planner counts it as that many slots, which holds only if kube-scheduler lets
/// every one of them in after a single preemption, not just the first.
#[tokio::test]
async fn a_pause_pod_holding_room_for_two_pods_lets_both_in_after_one_preemption() {
    let Some((_plane, admin, cluster)) = setup(Parts::WithControllers).await else { return };
    let pool = pool();
    // Room for the pause pod and half a CPU more: neither workload pod fits beside it.
    add_node(&admin, "general-1", &[("ballast.io/pool", "general")], "2500m", "16Gi").await;
    cluster.set_headroom(&pool, 0, &PodShape::new(2000, 512 << 20), 1).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "ballast-headroom");
    let pause = ListParams::default().labels("ballast.io/headroom=true");
    eventually(Duration::from_secs(60), "the pause pod bound to general-1", || async {
        let list = pods.list(&pause).await.unwrap();
        list.items.len() == 1 && list.items[0].spec.as_ref().unwrap().node_name.as_deref() == Some("general-1")
    })
    .await;

    create_pod(&admin, "default", workload("job-1", "1", json!({}))).await;
    create_pod(&admin, "default", workload("job-2", "1", json!({}))).await;
    let default_pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    eventually(Duration::from_secs(60), "both workload pods bound to general-1", || async {
        let mut bound = 0;
        for name in ["job-1", "job-2"] {
            let pod = default_pods.get(name).await.unwrap();
            bound += usize::from(pod.spec.unwrap().node_name.as_deref() == Some("general-1"));
        }
        bound == 2
    })
    .await;
    eventually(Duration::from_secs(60), "the pause pod's replacement unschedulable", || async {
        let list = pods.list(&pause).await.unwrap();
        list.items.len() == 1 && ballast_kube::pods::unschedulable_since(&list.items[0]).is_some()
    })
    .await;
}

#[tokio::test]
async fn cordon_and_a_drain_that_a_budget_blocks_then_allows() {
    let Some((_plane, admin, cluster)) = setup(Parts::WithControllers).await else { return };
    let pool = pool();
    add_node(&admin, "general-1", &[("ballast.io/pool", "general")], "4", "16Gi").await;
    add_node(&admin, "general-2", &[("ballast.io/pool", "general")], "4", "16Gi").await;
    add_node(&admin, "other-1", &[("ballast.io/pool", "other")], "4", "16Gi").await;

    let nodes = cluster.pool_nodes(&pool).await.unwrap();
    let mut names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["general-1", "general-2"]);
    assert!(nodes.iter().all(|n| n.ready && n.instance_id.starts_with("i-") && !n.unschedulable));

    let on = |node: &str| json!({ "spec": { "nodeName": node, "terminationGracePeriodSeconds": 0 } });
    create_pod(&admin, "default", workload("web-1", "500m", on("general-1"))).await;
    mark_running(&admin, "default", "web-1").await;
    let daemon = json!({ "metadata": { "name": "logs-1", "labels": { "app": "logs" }, "ownerReferences": [{
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "logs", "uid": "3f0c5c4e-2d7b-4c1e-9a51-6f8f1d2b7a10", "controller": true }] } });
    create_pod(&admin, "default", workload("logs-1", "100m", merge_into(daemon, on("general-1")))).await;
    let budget = json!({ "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": { "name": "web" }, "spec": { "minAvailable": 1, "selector": { "matchLabels": { "app": "web" } } } });
    create_v1beta1_pdb(&admin, budget).await;
    eventually(Duration::from_secs(60), "the budget sees one healthy pod", || async {
        pdbs_status(&admin).await == Some((1, 0))
    })
    .await;

    cluster.cordon("general-1").await.unwrap();
    let node: Node = Api::<Node>::all(admin.clone()).get("general-1").await.unwrap();
    assert_eq!(node.spec.unwrap().unschedulable, Some(true));
    // A node already gone (its instance reclaimed, the object deleted): a 404, nothing to do.
    cluster.cordon("general-gone").await.expect("a gone node needs no cordon");
    cluster.uncordon("general-gone").await.expect("nor an uncordon");

    let report = cluster.drain("general-1", Duration::from_secs(2)).await.unwrap();
    assert_eq!(report.evicted, 0);
    assert_eq!(report.blocked.len(), 1, "{report:?}");
    assert_eq!(report.blocked[0].0, "default/web-1");
    assert!(report.blocked[0].1.contains("PodDisruptionBudget"), "{report:?}");

    // A second replica elsewhere: the budget now allows one disruption; the drain finishes.
    create_pod(&admin, "default", workload("web-2", "500m", on("general-2"))).await;
    mark_running(&admin, "default", "web-2").await;
    let report = cluster.drain("general-1", Duration::from_secs(60)).await.unwrap();
    assert!(report.complete(), "{report:?}");
    assert_eq!(report.evicted, 1);
    let default_pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    assert!(default_pods.get_opt("web-1").await.unwrap().is_none(), "evicted");
    assert!(default_pods.get_opt("logs-1").await.unwrap().is_some(), "DaemonSet pods stay");
}

#[tokio::test]
async fn a_drain_honours_grace_periods_but_not_past_its_deadline() {
    let Some((_plane, admin, cluster)) = setup(Parts::ApiServer).await else { return };
    add_node(&admin, "general-1", &[("ballast.io/pool", "general")], "4", "16Gi").await;
    let slow = json!({ "metadata": { "name": "slow" }, "spec": { "nodeName": "general-1", "terminationGracePeriodSeconds": 600 } });
    create_pod(&admin, "default", workload("slow", "100m", slow)).await;
    let quick = json!({ "metadata": { "name": "quick" }, "spec": { "nodeName": "general-1", "terminationGracePeriodSeconds": 1 } });
    create_pod(&admin, "default", workload("quick", "100m", quick)).await;

    let report = cluster.drain("general-1", Duration::from_secs(5)).await.unwrap();
    assert_eq!(report.evicted, 2);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let grace = |name: &'static str| {
        let pods = pods.clone();
        async move { pods.get(name).await.unwrap().metadata.deletion_grace_period_seconds }
    };
    // No kubelet: both stay terminating, with the grace period the eviction asked for.
    assert_eq!(grace("quick").await, Some(1), "the pod's own, shorter grace period");
    let capped = grace("slow").await.unwrap();
    assert!((4..=5).contains(&capped), "capped at the drain's deadline, got {capped}");
    assert!(report.blocked.iter().all(|(_, why)| why.starts_with("terminating")), "{report:?}");
}

#[tokio::test]
async fn the_functions_group_cannot_do_more_than_its_role() {
    let Some((plane, _admin, _cluster)) = setup(Parts::ApiServer).await else { return };
    let functions = plane.client(FUNCTIONS_TOKEN);
    let pods: Api<Pod> = Api::namespaced(functions.clone(), "default");
    let denied = pods.delete("anything", &Default::default()).await.unwrap_err();
    assert!(matches!(denied, kube::Error::Api(ref s) if s.code == 403), "{denied:?}");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(functions.clone());
    let denied = secrets.list(&ListParams::default()).await.unwrap_err();
    assert!(matches!(denied, kube::Error::Api(ref s) if s.code == 403), "{denied:?}");

    // Deployments only in the headroom namespace and only the pools' own, by name.
    let forbidden = |r: Result<Deployment, kube::Error>| matches!(r, Err(kube::Error::Api(ref s)) if s.code == 403);
    let apply = |namespace: &str, name: &str| {
        let api: Api<Deployment> = Api::namespaced(functions.clone(), namespace);
        let body = json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": name },
            "spec": { "selector": { "matchLabels": { "a": "b" } }, "template": { "metadata": { "labels": { "a": "b" } },
            "spec": { "containers": [{ "name": "c", "image": "x" }] } } } });
        let name = name.to_string();
        async move { api.patch(&name, &PatchParams::apply("ballast"), &Patch::Apply(&body)).await }
    };
    assert!(forbidden(apply("default", "ballast-headroom-general").await), "no Deployment outside the namespace");
    assert!(forbidden(apply("kube-system", "coredns").await), "nor anyone else's");
    assert!(forbidden(apply("ballast-headroom", "ballast-forwarder").await), "nor another in the namespace by name");
    // Nothing in the forwarder's namespace: a Deployment there could run as its service
    // account (its AWS role). Before the headroom had a namespace of its own, this was allowed.
    assert!(forbidden(apply("ballast", "ballast-headroom-general").await), "no pool's Deployment beside the forwarder");
    let as_forwarder: Deployment = serde_json::from_value(json!({ "metadata": { "name": "sneaky" },
        "spec": { "selector": { "matchLabels": { "a": "b" } }, "template": { "metadata": { "labels": { "a": "b" } },
        "spec": { "serviceAccountName": "ballast-forwarder", "containers": [{ "name": "c", "image": "x" }] } } } }))
    .unwrap();
    let created =
        Api::<Deployment>::namespaced(functions.clone(), "ballast").create(&PostParams::default(), &as_forwarder).await;
    assert!(forbidden(created), "no Deployment created in the forwarder's namespace");
    let deployments: Api<Deployment> = Api::namespaced(functions.clone(), "ballast");
    assert!(forbidden(deployments.get("ballast-forwarder").await));
    let listed = deployments.list(&ListParams::default()).await;
    assert!(matches!(listed, Err(kube::Error::Api(ref s)) if s.code == 403), "no listing: {listed:?}");
    // PriorityClasses: only Ballast's, by name.
    let classes: Api<PriorityClass> = Api::all(functions.clone());
    let other = classes.get("system-cluster-critical").await;
    assert!(matches!(other, Err(kube::Error::Api(ref s)) if s.code == 403), "{other:?}");
    let pc = json!({ "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": { "name": "mine" }, "value": 1000000 });
    let made = classes.patch("mine", &PatchParams::apply("ballast"), &Patch::Apply(&pc)).await;
    assert!(matches!(made, Err(kube::Error::Api(ref s)) if s.code == 403), "{made:?}");
    // Pods: listed (drain, demand), never read one by one nor changed.
    let pods: Api<Pod> = Api::all(functions.clone());
    pods.list(&ListParams::default()).await.expect("list pods");
    let one = Api::<Pod>::namespaced(functions, "default").get("anything").await;
    assert!(matches!(one, Err(kube::Error::Api(ref s)) if s.code == 403), "{one:?}");
}

fn merge_into(mut a: serde_json::Value, b: serde_json::Value) -> serde_json::Value {
    merge(&mut a, b);
    a
}

/// v1.20 has PodDisruptionBudgets only in policy/v1beta1.
async fn create_v1beta1_pdb(admin: &kube::Client, body: serde_json::Value) {
    let request = http::Request::post("/apis/policy/v1beta1/namespaces/default/poddisruptionbudgets")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    admin.request_text(request).await.expect("create PDB");
}

/// (currentHealthy, disruptionsAllowed) of the `web` budget.
async fn pdbs_status(admin: &kube::Client) -> Option<(i64, i64)> {
    let request = http::Request::get("/apis/policy/v1beta1/namespaces/default/poddisruptionbudgets/web")
        .body(Vec::new())
        .unwrap();
    let pdb: serde_json::Value = admin.request(request).await.ok()?;
    let status = pdb.get("status")?;
    Some((status.get("currentHealthy")?.as_i64()?, status.get("disruptionsAllowed")?.as_i64()?))
}

#[tokio::test]
async fn demand_is_summed_across_list_pages() {
    let Some((_plane, admin, cluster)) = setup(Parts::ApiServer).await else { return };
    add_node(&admin, "general-1", &[("ballast.io/pool", "general")], "64", "256Gi").await;
    add_node(&admin, "other-1", &[("ballast.io/pool", "other")], "64", "256Gi").await;
    // 1,234 pods: three pages of 500. Every 10th elsewhere, every 7th pending in the pool.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let mut expected = (0u64, 0u32);
    let mut creates = Vec::new();
    for i in 0..1234u32 {
        let node = match (i % 10, i % 7) {
            (0, _) => Some("other-1"),
            (_, 0) => None,
            _ => Some("general-1"),
        };
        if node != Some("other-1") {
            expected.0 += 100;
            expected.1 += 1;
        }
        let pod: Pod =
            serde_json::from_value(workload(&format!("p-{i}"), "100m", json!({ "spec": { "nodeName": node } })))
                .unwrap();
        let pods = pods.clone();
        creates.push(async move { pods.create(&PostParams::default(), &pod).await.map(|_| ()) });
        if creates.len() == 50 {
            for r in futures::future::join_all(std::mem::take(&mut creates)).await {
                r.unwrap();
            }
        }
    }
    for r in futures::future::join_all(creates).await {
        r.unwrap();
    }
    let demand = cluster.pool_demand(&pool(), chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!((demand.cpu_millis, demand.pods), expected);
    assert_eq!(demand.memory_bytes, u64::from(expected.1) * (256 << 20));
}

/// Day one: the stack is deployed before the cluster side, the config in dry run. A
/// function whose identity is not let in yet (no RBAC: 403; no access entry: 401, an
/// unknown token here) reads the cluster as a detached one would, says it is waiting (a
/// metric each time, under its own name), and still refuses to change the cluster; a
/// live run fails as before (a planner seeing no nodes would complete hooks and withdraw
/// instances undrained); once the RBAC is applied the same reads see the node.
#[tokio::test]
async fn a_dry_run_not_let_in_yet_waits_for_cluster_access_and_a_live_one_fails() {
    use ballast_lambda::cluster::{FunctionCluster, WaitForAccess};
    use std::sync::atomic::{AtomicU32, Ordering};
    static WAITING: AtomicU32 = AtomicU32::new(0);
    fn count(doc: &serde_json::Value) {
        assert_eq!(doc["WaitingForClusterAccess"], 1, "{doc}");
        assert_eq!(doc["Function"], "schedule", "{doc}");
        WAITING.fetch_add(1, Ordering::SeqCst);
    }

    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    add_node(&admin, "ip-10-0-0-1.eu-west-1.compute.internal", &[("ballast.io/pool", "general")], "4", "16Gi").await;
    let function = |token: &str, dry_run: bool| {
        let connector = Connector::fixed(plane.kube_config(token)).expect("connector");
        let wait = dry_run.then_some(WaitForAccess { function: "schedule", metrics: count });
        FunctionCluster::Kube(Box::new(KubeCluster::new(connector, &[pool()])), wait)
    };
    let now = chrono::Utc::now();
    for (token, status) in [(FUNCTIONS_TOKEN, "403"), ("no-such-token", "401")] {
        let cluster = function(token, true);
        let before = WAITING.load(Ordering::SeqCst);
        assert_eq!(cluster.pool_nodes(&pool()).await.expect("waiting, not failed"), vec![], "{status}");
        assert_eq!(cluster.headroom(&pool()).await.expect("waiting, not failed"), vec![], "{status}");
        assert_eq!(cluster.pool_demand(&pool(), now).await.expect("waiting, not failed"), None, "{status}");
        assert_eq!(WAITING.load(Ordering::SeqCst) - before, 3, "each read counted ({status})");
        let unit = pool().headroom.unit_shape();
        let change = cluster.set_headroom(&pool(), 0, &unit, 2).await.expect_err("changes are still refused");
        assert!(change.to_string().contains(status), "{change}");
        let live = function(token, false).pool_nodes(&pool()).await.expect_err("a live run fails");
        assert!(live.to_string().contains(status), "{live}");
    }

    apply_manifests(
        &admin,
        "functions-rbac.yaml",
        &["PriorityClass", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
    )
    .await;
    let before = WAITING.load(Ordering::SeqCst);
    let nodes = function(FUNCTIONS_TOKEN, true).pool_nodes(&pool()).await.expect("let in");
    assert_eq!(nodes.len(), 1);
    assert_eq!(WAITING.load(Ordering::SeqCst), before, "no longer waiting");
}

/// "VERB deployments ballast-headroom-batch in ballast-headroom, ..." for the three slots
/// of each example pool (`shapes: auto`), in the order the doctor sorts them.
fn slots_of_both_pools(verb: &str) -> String {
    ["batch", "general"]
        .iter()
        .flat_map(|pool| (0..3).map(move |slot| ballast_core::shape::deployment_name(pool, slot)))
        .map(|name| format!("{verb} deployments {name} in ballast-headroom"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `ballast doctor`'s cluster checks against the API server's own authorizer: the shipped
/// RBAC lets the functions' group do every thing the functions do; without the headroom
/// Role's binding, exactly those things are named; the forwarder and aws-auth are found or
/// said missing with their fix.
#[tokio::test]
async fn doctor_asks_the_api_server_what_the_functions_may_do_and_finds_the_forwarder() {
    use ballast_cli::ops::doctor::cluster as doctor;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let Some((plane, admin, _)) = setup(Parts::ApiServer).await else { return };
    let config = ballast_tests::example_config();

    let allowed = doctor::rbac(&admin, &config).await;
    assert!(allowed.ok, "{allowed:#?}");
    assert_eq!(allowed.detail, format!("may do all {} things the functions do", doctor::needs(&config).len()));
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "ballast-headroom");
    for b in bindings.list(&Default::default()).await.unwrap().items {
        bindings.delete(b.metadata.name.as_deref().unwrap(), &Default::default()).await.unwrap();
    }
    let denied = doctor::rbac(&admin, &config).await;
    assert!(!denied.ok, "{denied:#?}");
    assert_eq!(
        denied.detail,
        format!(
            "may not create deployments in ballast-headroom, {}, {}",
            slots_of_both_pools("get"),
            slots_of_both_pools("patch")
        )
    );
    // The functions' own group may not ask: the finding says whose kubeconfig to use.
    let functions = kube::Client::try_from(plane.kube_config(FUNCTIONS_TOKEN)).unwrap();
    let refused = doctor::rbac(&functions, &config).await;
    assert!(!refused.ok && refused.detail.starts_with("cannot ask the API server"), "{refused:#?}");

    let missing = doctor::forwarder(&admin).await;
    assert_eq!((missing.ok, missing.detail.as_str()), (false, "not deployed"), "{missing:#?}");
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "ballast");
    let forwarder: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "ballast-forwarder" },
        "spec": {
            "selector": { "matchLabels": { "app": "f" } },
            "template": { "metadata": { "labels": { "app": "f" } }, "spec": { "containers": [{ "name": "f", "image": "f:1" }] } },
        },
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &forwarder).await.unwrap();
    let down = doctor::forwarder(&admin).await;
    assert!(!down.ok && down.detail.starts_with("deployed, none available"), "{down:#?}");
    let status = json!({ "status": { "replicas": 1, "readyReplicas": 1, "availableReplicas": 1 } });
    deployments.patch_status("ballast-forwarder", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    assert!(doctor::forwarder(&admin).await.ok);

    let roles = vec!["arn:aws:iam::123456789012:role/ballast-test-schedule".to_string()];
    let unmapped = doctor::aws_auth(&admin, &roles).await;
    assert!(!unmapped.ok && unmapped.fix.as_deref().unwrap().contains("groups: [ballast:functions]"), "{unmapped:#?}");
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "aws-auth" },
        "data": { "mapRoles": "- rolearn: arn:aws:iam::123456789012:role/ballast-test-schedule\n  username: ballast-function:{{SessionName}}\n  groups:\n    - ballast:functions\n" },
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), "kube-system").create(&PostParams::default(), &map).await.unwrap();
    let mapped = doctor::aws_auth(&admin, &roles).await;
    assert!(mapped.ok, "{mapped:#?}");
}
