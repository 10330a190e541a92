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

/// AWS's DescribeInstances answer (API reference shape): a spot instance the market took,
/// terminated, tagged by its ASG; and one launched outside any ASG.
fn ec2_instances() -> HttpResponse {
    ok("<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r</requestId>\
        <reservationSet><item><reservationId>r-1</reservationId><ownerId>123456789012</ownerId><instancesSet>\
        <item><instanceId>i-0a1b2c3d4e5f60001</instanceId><instanceState><code>48</code><name>terminated</name>\
        </instanceState><stateReason><code>Server.SpotInstanceTermination</code><message>Server.SpotInstanceTermination: \
        Spot instance termination</message></stateReason><instanceLifecycle>spot</instanceLifecycle><tagSet><item>\
        <key>aws:autoscaling:groupName</key><value>eks-general-spot</value></item><item><key>Name</key>\
        <value>node</value></item></tagSet></item>\
        <item><instanceId>i-0a1b2c3d4e5f60002</instanceId><instanceState><code>16</code><name>running</name>\
        </instanceState><tagSet><item><key>Name</key><value>bastion</value></item></tagSet></item>\
        </instancesSet></item></reservationSet></DescribeInstancesResponse>"
        .to_string())
}

/// An instance gone from its ASG is looked up by an `instance-id` filter, not by id (EC2
/// refuses a whole request naming an id it no longer lists); its tag names its ASG, its
/// state reason says the spot market took it.
#[tokio::test]
async fn the_asg_that_launched_an_instance_is_read_from_its_ec2_tag() {
    let ids = vec!["i-0a1b2c3d4e5f60001".to_string(), "i-0a1b2c3d4e5f60002".into(), "i-0fffffffffffffff0".into()];
    let asked = ids.clone();
    let describe = mock!(aws_sdk_ec2::Client::describe_instances)
        .match_requests(move |r| {
            r.instance_ids().is_empty()
                && r.filters().iter().any(|f| f.name() == Some("instance-id") && f.values() == asked.as_slice())
        })
        .then_http_response(ec2_instances);
    let ec2 = mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&describe]);
    let autoscaling = AwsAutoscaling::from_clients(mock_client!(aws_sdk_autoscaling, []), ec2);
    let found = autoscaling.launched_by(&ids).await.unwrap();
    assert_eq!(describe.num_calls(), 1);
    let taken = &found["i-0a1b2c3d4e5f60001"];
    assert_eq!((taken.asg.as_deref(), taken.spot_reclaimed), (Some("eks-general-spot"), true));
    let loner = &found["i-0a1b2c3d4e5f60002"];
    assert_eq!((loner.asg.as_deref(), loner.spot_reclaimed), (None, false));
    assert!(!found.contains_key("i-0fffffffffffffff0"), "EC2 does not list it: {found:?}");
}

/// A throttled lookup names the AWS action and keeps the SDK's error as its source.
#[tokio::test]
async fn a_failed_lookup_names_describe_instances() {
    let throttled = mock!(aws_sdk_ec2::Client::describe_instances).then_http_response(|| {
        HttpResponse::new(
            StatusCode::try_from(503).unwrap(),
            SdkBody::from(
                "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>\
                 </Error></Errors><RequestID>r</RequestID></Response>",
            ),
        )
    });
    let ec2 = mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&throttled]);
    let autoscaling = AwsAutoscaling::from_clients(mock_client!(aws_sdk_autoscaling, []), ec2);
    let err = autoscaling.launched_by(&["i-0a1b2c3d4e5f60001".to_string()]).await.unwrap_err();
    assert_eq!(err.operation, "DescribeInstances");
    assert!(err.is_retryable(), "{err:?}");
    assert!(std::error::Error::source(&err).is_some(), "the SDK's error kept: {err:?}");
}
