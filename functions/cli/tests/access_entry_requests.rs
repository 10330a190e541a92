//! Request-level tests of `ballast doctor`'s access entry check (moto has no access entry
//! API): what it asks EKS for and how it reads each answer.
#![cfg(feature = "aws")]

use aws_sdk_eks::operation::describe_access_entry::DescribeAccessEntryOutput;
use aws_sdk_eks::operation::describe_cluster::DescribeClusterOutput;
use aws_sdk_eks::types::{AccessConfigResponse, AccessEntry, AuthenticationMode, Cluster};
use aws_smithy_mocks::{mock, mock_client, RuleMode};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use ballast_aws::AwsAutoscaling;
use ballast_cli::ops::doctor::Doctor;
use ballast_core::config::Config;

const CONFIG: &str = "cluster: prod\nregion: eu-west-1\nstate_table: ballast-state\npools:\n  - name: general\n    spot_asgs: [s]\n    on_demand_asg: od\n";

fn doctor(eks: aws_sdk_eks::Client) -> Doctor {
    let unused = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("eu-west-1"))
        .build();
    Doctor {
        eks,
        ssm: aws_sdk_ssm::Client::new(&unused),
        dynamodb: aws_sdk_dynamodb::Client::new(&unused),
        sqs: aws_sdk_sqs::Client::new(&unused),
        events: aws_sdk_eventbridge::Client::new(&unused),
        autoscaling: AwsAutoscaling::from_clients(mock_client!(aws_sdk_autoscaling, []), mock_client!(aws_sdk_ec2, [])),
    }
}

fn cluster(mode: AuthenticationMode) -> DescribeClusterOutput {
    let cluster = Cluster::builder()
        .name("prod")
        .arn("arn:aws-cn:eks:cn-north-1:210987654321:cluster/prod")
        .access_config(AccessConfigResponse::builder().authentication_mode(mode).build())
        .build();
    DescribeClusterOutput::builder().cluster(cluster).build()
}

fn not_found() -> HttpResponse {
    let mut response = HttpResponse::new(
        StatusCode::try_from(404).unwrap(),
        SdkBody::from(r#"{"message":"The specified principalArn could not be found."}"#),
    );
    response.headers_mut().insert("x-amzn-errortype", "ResourceNotFoundException");
    response
}

fn role(name: &str) -> String {
    format!("arn:aws-cn:iam::210987654321:role/ballast-prod-{name}")
}

#[tokio::test]
async fn each_function_role_needs_an_entry_in_the_functions_group() {
    let config = Config::from_yaml(CONFIG).unwrap();
    let describe = mock!(aws_sdk_eks::Client::describe_cluster)
        .match_requests(|r| r.name() == Some("prod"))
        .then_output(|| cluster(AuthenticationMode::Api));
    let entry = |function: &'static str, groups: &'static [&'static str]| {
        mock!(aws_sdk_eks::Client::describe_access_entry)
            .match_requests(move |r| {
                r.cluster_name() == Some("prod") && r.principal_arn() == Some(role(function).as_str())
            })
            .then_output(move || {
                let entry = AccessEntry::builder()
                    .principal_arn(role(function))
                    .set_kubernetes_groups(Some(groups.iter().map(|g| g.to_string()).collect()));
                DescribeAccessEntryOutput::builder().access_entry(entry.build()).build()
            })
    };
    let interruption = entry("interruption", &["ballast:functions"]);
    let schedule = mock!(aws_sdk_eks::Client::describe_access_entry)
        .match_requests(|r| r.principal_arn() == Some(role("schedule").as_str()))
        .then_http_response(not_found);
    let cluster_events = entry("cluster-events", &["system:masters"]);
    let eks = mock_client!(aws_sdk_eks, RuleMode::MatchAny, [&describe, &interruption, &schedule, &cluster_events]);
    let (finding, aws_auth) = doctor(eks).access(&config).await;
    assert!(aws_auth.is_none());
    assert!(!finding.ok, "{finding:#?}");
    assert_eq!(
        finding.detail,
        format!(
            "{} has no access entry; {} is in [\"system:masters\"], not ballast:functions",
            role("schedule"),
            role("cluster-events")
        )
    );
    let fix = finding.fix.unwrap();
    assert!(fix.starts_with("deploy with ClusterAccessEntries=true (-c accessEntries=true), or: "), "{fix}");
    assert!(
        fix.contains(&format!(
            "aws eks create-access-entry --cluster-name prod --principal-arn {} --kubernetes-groups ballast:functions",
            role("schedule")
        )),
        "{fix}"
    );
    assert_eq!(interruption.num_calls(), 1);
}

#[tokio::test]
async fn a_cluster_on_aws_auth_only_hands_the_roles_to_the_cluster_check() {
    let config = Config::from_yaml(CONFIG).unwrap();
    let describe = mock!(aws_sdk_eks::Client::describe_cluster).then_output(|| cluster(AuthenticationMode::ConfigMap));
    let eks = mock_client!(aws_sdk_eks, [&describe]);
    let (finding, aws_auth) = doctor(eks).access(&config).await;
    assert!(finding.ok, "{finding:#?}");
    assert_eq!(aws_auth, Some(vec![role("interruption"), role("schedule"), role("cluster-events")]));
}

#[tokio::test]
async fn with_api_and_config_map_a_role_without_an_entry_is_looked_up_in_aws_auth() {
    let config = Config::from_yaml(CONFIG).unwrap();
    let describe =
        mock!(aws_sdk_eks::Client::describe_cluster).then_output(|| cluster(AuthenticationMode::ApiAndConfigMap));
    let schedule = mock!(aws_sdk_eks::Client::describe_access_entry)
        .match_requests(|r| r.principal_arn() == Some(role("schedule").as_str()))
        .then_http_response(not_found);
    let others = mock!(aws_sdk_eks::Client::describe_access_entry).then_output(|| {
        let entry = AccessEntry::builder().kubernetes_groups("ballast:functions").build();
        DescribeAccessEntryOutput::builder().access_entry(entry).build()
    });
    let eks = mock_client!(aws_sdk_eks, RuleMode::MatchAny, [&describe, &schedule, &others]);
    let (finding, aws_auth) = doctor(eks).access(&config).await;
    assert!(finding.ok, "{finding:#?}");
    assert_eq!(aws_auth, Some(vec![role("schedule")]));
    assert!(finding.detail.starts_with("2 of 3 function roles have an entry"), "{finding:#?}");
}
