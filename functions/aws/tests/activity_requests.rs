//! Request-level test of DescribeScalingActivities, which moto answers with no activities
//! at all: the adapter reads AWS's own answer (the API reference's example and the launch
//! notification's wording) into the pool's observed activities.

use aws_smithy_mocks::{mock, mock_client, RuleMode};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use ballast_aws::AwsAutoscaling;
use ballast_core::config::Config;
use ballast_core::observe::ActivityStatus;
use ballast_core::ports::Autoscaling;

fn ok(body: &'static str) -> HttpResponse {
    HttpResponse::new(StatusCode::try_from(200).unwrap(), SdkBody::from(body))
}

fn group(name: &str) -> String {
    format!(
        "<member><AutoScalingGroupName>{name}</AutoScalingGroupName>\
         <AutoScalingGroupARN>arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:1:autoScalingGroupName/{name}</AutoScalingGroupARN>\
         <MinSize>0</MinSize><MaxSize>10</MaxSize><DesiredCapacity>1</DesiredCapacity><DefaultCooldown>300</DefaultCooldown>\
         <AvailabilityZones><member>eu-west-1a</member></AvailabilityZones><HealthCheckType>EC2</HealthCheckType>\
         <CreatedTime>2026-11-20T08:00:00Z</CreatedTime><Instances/><Tags/></member>"
    )
}

fn groups(name: &str) -> HttpResponse {
    let body = format!(
        "<DescribeAutoScalingGroupsResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\">\
         <DescribeAutoScalingGroupsResult><AutoScalingGroups>{}</AutoScalingGroups></DescribeAutoScalingGroupsResult>\
         <ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></DescribeAutoScalingGroupsResponse>",
        group(name)
    );
    HttpResponse::new(StatusCode::try_from(200).unwrap(), SdkBody::from(body))
}

const ACTIVITIES: &str = r#"<DescribeScalingActivitiesResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">
<DescribeScalingActivitiesResult>
<Activities>
   <member>
      <StatusCode>InProgress</StatusCode>
      <Progress>30</Progress>
      <ActivityId>4e6156f4-a9e2-4bda-a7fd-33f2ae528958</ActivityId>
      <StartTime>2026-11-20T09:12:14.445Z</StartTime>
      <AutoScalingGroupName>eks-general-spot</AutoScalingGroupName>
      <Cause>At 2026-11-20T09:12:04Z a user request explicitly set group desired capacity changing the desired capacity from 0 to 1.  At 2026-11-20T09:12:13Z an instance was started in response to a difference between desired and actual capacity, increasing the capacity from 0 to 1.</Cause>
      <Details>{"Subnet ID":"subnet-0a1b2c3d","Availability Zone":"eu-west-1a"}</Details>
      <Description>Launching a new EC2 instance: i-0598c7d356eba48d7</Description>
   </member>
   <member>
      <StatusCode>Failed</StatusCode>
      <Progress>0</Progress>
      <ActivityId>063308ae-aa22-4a9b-94f4-9faeEXAMPLE</ActivityId>
      <StartTime>2026-11-20T09:02:07.882Z</StartTime>
      <AutoScalingGroupName>eks-general-spot</AutoScalingGroupName>
      <Cause>At 2026-11-20T09:01:30Z a user request created an AutoScalingGroup changing the desired capacity from 0 to 1.  At 2026-11-20T09:02:07Z an instance was started in response to a difference between desired and actual capacity, increasing the capacity from 0 to 1.</Cause>
      <Details>{}</Details>
      <Description>Launching a new EC2 instance.  Status Reason: The image id 'ami-4edb0327' does not exist. Launching EC2 instance failed.</Description>
      <EndTime>2026-11-20T09:02:08Z</EndTime>
      <StatusMessage>The image id 'ami-4edb0327' does not exist. Launching EC2 instance failed.</StatusMessage>
   </member>
</Activities>
</DescribeScalingActivitiesResult>
<ResponseMetadata>
   <RequestId>7a641adc-84c5-11e1-a8a5-217ebEXAMPLE</RequestId>
</ResponseMetadata>
</DescribeScalingActivitiesResponse>"#;

const CONFIG: &str = "cluster: prod-eks\nregion: eu-west-1\naccount: \"123456789012\"\nstate_table: ballast-state\n\
pools:\n  - name: general\n    spot_asgs: [eks-general-spot]\n    on_demand_asg: eks-general-on-demand\n";

/// A spot ASG's recent activities, as AWS words them: the launch in progress names its
/// instance (which dates the launch for a wait target), the failed one does not and keeps
/// its status message (which a capacity error is read from).
#[tokio::test]
async fn a_spot_asgs_activities_are_read_with_the_instance_each_launch_started() {
    let spot = mock!(aws_sdk_autoscaling::Client::describe_auto_scaling_groups)
        .match_requests(|r| r.auto_scaling_group_names() == ["eks-general-spot"])
        .then_http_response(|| groups("eks-general-spot"));
    let on_demand = mock!(aws_sdk_autoscaling::Client::describe_auto_scaling_groups)
        .match_requests(|r| r.auto_scaling_group_names() == ["eks-general-on-demand"])
        .then_http_response(|| groups("eks-general-on-demand"));
    let activities = mock!(aws_sdk_autoscaling::Client::describe_scaling_activities)
        .match_requests(|r| r.auto_scaling_group_name() == Some("eks-general-spot"))
        .then_http_response(|| ok(ACTIVITIES));
    let client = mock_client!(aws_sdk_autoscaling, RuleMode::MatchAny, [&spot, &on_demand, &activities]);
    let autoscaling = AwsAutoscaling::from_clients(client, mock_client!(aws_sdk_ec2, []));
    let config = Config::from_yaml(CONFIG).unwrap();
    let (spot_asgs, on_demand_asg) = autoscaling.describe_pool(&config.pools[0]).await.unwrap();
    assert_eq!(activities.num_calls(), 1, "read for the spot ASG only");
    assert!(on_demand_asg.unwrap().activities.is_empty());
    let read = &spot_asgs[0].activities;
    assert_eq!(read.len(), 2);
    assert_eq!(read[0].status, ActivityStatus::InProgress);
    assert_eq!(read[0].launched_instance(), Some("i-0598c7d356eba48d7"));
    assert_eq!(read[0].start.to_rfc3339(), "2026-11-20T09:12:14.445+00:00");
    assert_eq!(read[1].status, ActivityStatus::Failed);
    assert_eq!(read[1].launched_instance(), None);
    assert!(read[1].status_message.starts_with("The image id 'ami-4edb0327' does not exist"), "{:?}", read[1]);
}

/// Activities read beside the listings and throttled: the pool's description fails with
/// that error, retryable, after one read (the failed read is not made a second time).
#[tokio::test]
async fn throttled_activities_fail_the_description_after_one_read() {
    let spot = mock!(aws_sdk_autoscaling::Client::describe_auto_scaling_groups)
        .match_requests(|r| r.auto_scaling_group_names() == ["eks-general-spot"])
        .then_http_response(|| groups("eks-general-spot"));
    let on_demand = mock!(aws_sdk_autoscaling::Client::describe_auto_scaling_groups)
        .match_requests(|r| r.auto_scaling_group_names() == ["eks-general-on-demand"])
        .then_http_response(|| groups("eks-general-on-demand"));
    let throttled = mock!(aws_sdk_autoscaling::Client::describe_scaling_activities).then_http_response(|| {
        HttpResponse::new(
            StatusCode::try_from(400).unwrap(),
            SdkBody::from(
                "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message>\
                 </Error><RequestId>r</RequestId></ErrorResponse>",
            ),
        )
    });
    let client = mock_client!(aws_sdk_autoscaling, RuleMode::MatchAny, [&spot, &on_demand, &throttled]);
    let autoscaling = AwsAutoscaling::from_clients(client, mock_client!(aws_sdk_ec2, []));
    let config = Config::from_yaml(CONFIG).unwrap();
    let err = autoscaling.describe_pool(&config.pools[0]).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("DescribeScalingActivities"), "{err}");
    assert_eq!(
        throttled.num_calls(),
        3,
        "one read (the SDK's three attempts), not one beside the listings and one after"
    );
}
