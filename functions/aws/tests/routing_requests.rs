//! Request-level tests of the routing lookups, where moto is lenient: it takes any number
//! of instance ids in one call and ignores the `auto-scaling-group` filter's limits.

use aws_smithy_mocks::{mock, mock_client, RuleMode};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use ballast_aws::AwsAutoscaling;
use ballast_core::ports::Autoscaling;

fn ok(body: String) -> HttpResponse {
    HttpResponse::new(StatusCode::try_from(200).unwrap(), SdkBody::from(body))
}

/// AWS's DescribeAutoScalingInstances answer (API reference shape) for these ids, in `asg`.
fn instances(ids: &[String], asg: &str) -> HttpResponse {
    let members: String = ids
        .iter()
        .map(|id| {
            format!(
                "<member><HealthStatus>HEALTHY</HealthStatus><AutoScalingGroupName>{asg}</AutoScalingGroupName>\
                 <AvailabilityZone>eu-west-1a</AvailabilityZone><InstanceId>{id}</InstanceId>\
                 <InstanceType>m5.large</InstanceType><LifecycleState>InService</LifecycleState>\
                 <ProtectedFromScaleIn>false</ProtectedFromScaleIn></member>"
            )
        })
        .collect();
    ok(format!(
        "<DescribeAutoScalingInstancesResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\">\
         <DescribeAutoScalingInstancesResult><AutoScalingInstances>{members}</AutoScalingInstances>\
         </DescribeAutoScalingInstancesResult><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata>\
         </DescribeAutoScalingInstancesResponse>"
    ))
}

/// 60 instances: AWS takes at most 50 ids a call, so two calls (50, then 10), one answer.
#[tokio::test]
async fn instances_are_looked_up_fifty_ids_a_call() {
    let ids: Vec<String> = (0..60).map(|n| format!("i-{n:017x}")).collect();
    let (first, rest) = (ids[..50].to_vec(), ids[50..].to_vec());
    let (first_answer, rest_answer) = (first.clone(), rest.clone());
    let first_call = mock!(aws_sdk_autoscaling::Client::describe_auto_scaling_instances)
        .match_requests(move |r| r.instance_ids() == first.as_slice())
        .then_http_response(move || instances(&first_answer, "eks-general-spot"));
    let rest_call = mock!(aws_sdk_autoscaling::Client::describe_auto_scaling_instances)
        .match_requests(move |r| r.instance_ids() == rest.as_slice())
        .then_http_response(move || instances(&rest_answer, "eks-batch-spot"));
    let client = mock_client!(aws_sdk_autoscaling, RuleMode::MatchAny, [&first_call, &rest_call]);
    let autoscaling = AwsAutoscaling::from_clients(client, mock_client!(aws_sdk_ec2, []));
    let found = autoscaling.asgs_of_instances(&ids).await.unwrap();
    assert_eq!((first_call.num_calls(), rest_call.num_calls()), (1, 1));
    assert_eq!(found.len(), 60);
    assert_eq!(found[&ids[0]], "eks-general-spot");
    assert_eq!(found[&ids[59]], "eks-batch-spot");
}

/// DescribeTags answers tags of the ASGs asked for; a tag of another ASG (an answer that
/// ignored the filter) is not taken for theirs.
#[tokio::test]
async fn tags_are_read_for_the_asgs_asked_for_only() {
    let tags = mock!(aws_sdk_autoscaling::Client::describe_tags)
        .match_requests(|r| {
            r.filters().iter().any(|f| f.name() == Some("auto-scaling-group") && f.values() == ["eks-general-spot"])
                && r.max_records() == Some(100)
        })
        .then_http_response(|| {
            ok("<DescribeTagsResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\"><DescribeTagsResult><Tags>\
                <member><ResourceId>eks-general-spot</ResourceId><PropagateAtLaunch>true</PropagateAtLaunch>\
                <Value>general</Value><Key>ballast.io/pool</Key><ResourceType>auto-scaling-group</ResourceType></member>\
                <member><ResourceId>eks-other</ResourceId><PropagateAtLaunch>true</PropagateAtLaunch>\
                <Value>other</Value><Key>ballast.io/pool</Key><ResourceType>auto-scaling-group</ResourceType></member>\
                </Tags></DescribeTagsResult><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata>\
                </DescribeTagsResponse>"
                .to_string())
        });
    let client = mock_client!(aws_sdk_autoscaling, RuleMode::MatchAny, [&tags]);
    let autoscaling = AwsAutoscaling::from_clients(client, mock_client!(aws_sdk_ec2, []));
    let read = autoscaling.asg_tags(&["eks-general-spot".to_string()]).await.unwrap();
    assert_eq!(tags.num_calls(), 1);
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read["eks-general-spot"]["ballast.io/pool"], "general");
}
