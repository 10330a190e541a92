// The same system as infra/sam/template.yaml: three Rust functions built with
// cargo-lambda, the rules and queue that feed them, the schedules, the forwarder's
// bus, the state table, the config; one least-privilege role per function.
import * as path from 'path';
import { CfnOutput, CfnResource, Duration, RemovalPolicy, Stack, StackProps, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as eks from 'aws-cdk-lib/aws-eks';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as eventsources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { RustFunction } from 'cargo-lambda-cdk';
import { Construct } from 'constructs';

export interface HeadroomOverride {
  cron: string;
  timeZone: string;
  pool: string;
  percent: number;
  for: string;
}

export interface BallastProps extends StackProps {
  clusterName: string;
  config: string;
  stateTableName: string;
  vpcId: string;
  subnetIds: string[];
  securityGroupIds: string[];
  availabilityZones: string[];
  headroomOverride?: HeadroomOverride;
}

/** The AWS events the interruption function takes: one rule each, into the queue. */
export const QUEUE_RULES: Record<string, events.EventPattern> = {
  'spot-interruption': { source: ['aws.ec2'], detailType: ['EC2 Spot Instance Interruption Warning'] },
  rebalance: { source: ['aws.ec2'], detailType: ['EC2 Instance Rebalance Recommendation'] },
  // Only the losses matter: pending and running would be noise.
  'state-change': {
    source: ['aws.ec2'],
    detailType: ['EC2 Instance State-change Notification'],
    detail: { state: ['stopping', 'stopped', 'shutting-down', 'terminated'] },
  },
  'launch-unsuccessful': { source: ['aws.autoscaling'], detailType: ['EC2 Instance Launch Unsuccessful'] },
  lifecycle: {
    source: ['aws.autoscaling'],
    detailType: ['EC2 Instance-terminate Lifecycle Action'],
    detail: { LifecycleTransition: ['autoscaling:EC2_INSTANCE_TERMINATING'] },
  },
  health: {
    source: ['aws.health'],
    detailType: ['AWS Health Event'],
    detail: { service: ['EC2'], eventTypeCategory: ['scheduledChange'] },
  },
};

export const FORWARDER_PATTERN: events.EventPattern = {
  source: ['ballast.kubernetes'],
  detailType: ['Pool Demand Changed', 'Pods Unschedulable', 'Node Lifecycle'],
};

const WORKSPACE = path.resolve(__dirname, '..', '..', '..', 'Cargo.toml');
const FUNCTION_TIMEOUT = Duration.seconds(300);

export class BallastStack extends Stack {
  constructor(scope: Construct, id: string, props: BallastProps) {
    super(scope, id, props);
    const prefix = `ballast-${props.clusterName}`;

    // ---- configuration and state ----
    const config = new ssm.StringParameter(this, 'Config', {
      parameterName: `/ballast/${props.clusterName}/config`,
      stringValue: props.config,
      tier: ssm.ParameterTier.ADVANCED,
      description: 'ballast.yaml, read by the functions at start.',
    });
    const table = new dynamodb.Table(this, 'State', {
      tableName: props.stateTableName,
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      timeToLiveAttribute: 'expires_at',
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      removalPolicy: RemovalPolicy.RETAIN,
    });

    // ---- the AWS events: rules into a queue with a dead-letter queue ----
    const deadLetters = new sqs.Queue(this, 'EventsDeadLetterQueue', {
      queueName: `${prefix}-events-dlq`,
      retentionPeriod: Duration.days(14),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
    });
    const queue = new sqs.Queue(this, 'EventsQueue', {
      queueName: `${prefix}-events`,
      // Six times the longest function timeout (900 s), as Lambda's SQS integration recommends.
      visibilityTimeout: Duration.seconds(5400),
      retentionPeriod: Duration.hours(1),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      deadLetterQueue: { queue: deadLetters, maxReceiveCount: 5 },
    });
    new cloudwatch.Alarm(this, 'DeadLetterAlarm', {
      alarmName: `${prefix}-dead-letters`,
      alarmDescription: 'Events Ballast could not handle are waiting in the dead-letter queue; read them and their ballast-error attribute.',
      metric: deadLetters.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(5), statistic: 'Maximum' }),
      threshold: 0,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    for (const [name, pattern] of Object.entries(QUEUE_RULES)) {
      new events.Rule(this, `Rule-${name}`, {
        ruleName: `${prefix}-${name}`,
        eventPattern: pattern,
        targets: [new targets.SqsQueue(queue)],
      });
    }

    // ---- the functions, one role each ----
    const vpc = props.subnetIds.length
      ? ec2.Vpc.fromVpcAttributes(this, 'Vpc', {
          vpcId: props.vpcId,
          availabilityZones: props.availabilityZones,
          privateSubnetIds: props.subnetIds,
        })
      : undefined;
    const securityGroups = props.securityGroupIds.map((sg, i) => ec2.SecurityGroup.fromSecurityGroupId(this, `Sg${i}`, sg));

    const reconcile = new iam.ManagedPolicy(this, 'ReconcilePolicy', {
      description: 'Ballast reconcile: read and change the tagged ASGs of its pools, the state table, the config.',
      statements: [
        new iam.PolicyStatement({ sid: 'ReadConfig', actions: ['ssm:GetParameter'], resources: [config.parameterArn] }),
        new iam.PolicyStatement({
          sid: 'State',
          actions: ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:DeleteItem', 'dynamodb:BatchGetItem', 'dynamodb:BatchWriteItem'],
          resources: [table.tableArn],
        }),
        new iam.PolicyStatement({
          sid: 'ChangeTaggedAsgs',
          actions: [
            'autoscaling:SetDesiredCapacity',
            'autoscaling:TerminateInstanceInAutoScalingGroup',
            'autoscaling:CompleteLifecycleAction',
            'autoscaling:RecordLifecycleActionHeartbeat',
          ],
          resources: [`arn:${this.partition}:autoscaling:${this.region}:${this.account}:autoScalingGroup:*:autoScalingGroupName/*`],
          // Only ASGs tagged ballast.io/pool (any value) can be changed.
          conditions: { Null: { 'aws:ResourceTag/ballast.io/pool': 'false' } },
        }),
        new iam.PolicyStatement({
          sid: 'ReadAsgsAndInstances',
          actions: ['autoscaling:DescribeAutoScalingGroups', 'autoscaling:DescribeScalingActivities', 'ec2:DescribeInstances', 'ec2:DescribeSpotPriceHistory'],
          resources: ['*'],
        }),
      ],
    });
    const vpcAccess = vpc
      ? new iam.ManagedPolicy(this, 'VpcAccessPolicy', {
          description: 'Ballast functions in the VPC (private EKS endpoint).',
          statements: [
            new iam.PolicyStatement({
              actions: ['ec2:CreateNetworkInterface', 'ec2:DeleteNetworkInterface', 'ec2:AssignPrivateIpAddresses', 'ec2:UnassignPrivateIpAddresses'],
              resources: ['network-interface', 'subnet', 'security-group'].map((r) => `arn:${this.partition}:ec2:${this.region}:${this.account}:${r}/*`),
            }),
            new iam.PolicyStatement({ actions: ['ec2:DescribeNetworkInterfaces'], resources: ['*'] }),
          ],
        })
      : undefined;

    const makeFunction = (name: string, reserved: number, extra: iam.PolicyStatement[], environment: Record<string, string> = {}) => {
      const functionName = `${prefix}-${name}`;
      const logGroup = new logs.LogGroup(this, `${name}-logs`, {
        logGroupName: `/aws/lambda/${functionName}`,
        retention: logs.RetentionDays.ONE_MONTH,
        removalPolicy: RemovalPolicy.DESTROY,
      });
      const role = new iam.Role(this, `${name}-role`, {
        roleName: functionName,
        assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
        managedPolicies: vpcAccess ? [reconcile, vpcAccess] : [reconcile],
        inlinePolicies: {
          function: new iam.PolicyDocument({
            statements: [
              new iam.PolicyStatement({ sid: 'Logs', actions: ['logs:CreateLogStream', 'logs:PutLogEvents'], resources: [`${logGroup.logGroupArn}:*`] }),
              ...extra,
            ],
          }),
        },
      });
      const fn = new RustFunction(this, name, {
        functionName,
        manifestPath: WORKSPACE,
        binaryName: name,
        architecture: lambda.Architecture.ARM_64,
        memorySize: 128,
        timeout: FUNCTION_TIMEOUT,
        role,
        logGroup,
        loggingFormat: lambda.LoggingFormat.JSON,
        reservedConcurrentExecutions: reserved,
        vpc,
        securityGroups: vpc ? securityGroups : undefined,
        environment: {
          BALLAST_CONFIG_PARAMETER: config.parameterName,
          BALLAST_ACCOUNT_ID: this.account,
          RUST_LOG: 'info',
          ...environment,
        },
      });
      return { fn, role, logGroup };
    };

    const interruption = makeFunction(
      'interruption',
      2,
      [
        new iam.PolicyStatement({ sid: 'DeadLetters', actions: ['sqs:SendMessage'], resources: [deadLetters.queueArn] }),
      ],
      { BALLAST_DEAD_LETTER_QUEUE_URL: deadLetters.queueUrl },
    );
    interruption.fn.addEventSource(
      new eventsources.SqsEventSource(queue, { batchSize: 10, maxBatchingWindow: Duration.seconds(1), reportBatchItemFailures: true }),
    );
    const schedule = makeFunction('schedule', 1, []);
    const clusterEvents = makeFunction('cluster-events', 2, []);

    // ---- the forwarder's bus ----
    const bus = new events.EventBus(this, 'ForwarderBus', { eventBusName: prefix });
    new events.Rule(this, 'ForwarderRule', {
      ruleName: `${prefix}-forwarder`,
      eventBus: bus,
      eventPattern: FORWARDER_PATTERN,
      targets: [new targets.LambdaFunction(clusterEvents.fn)],
    });
    // The forwarder's AWS identity (EKS Pod Identity for ballast/ballast-forwarder): it may
    // put events on this bus and nothing else.
    const forwarderRole = new iam.Role(this, 'ForwarderRole', {
      assumedBy: new iam.ServicePrincipal('pods.eks.amazonaws.com', { conditions: { StringEquals: { 'aws:SourceAccount': this.account } } }),
      inlinePolicies: {
        'put-events': new iam.PolicyDocument({
          statements: [new iam.PolicyStatement({ actions: ['events:PutEvents'], resources: [bus.eventBusArn] })],
        }),
      },
    });
    forwarderRole.assumeRolePolicy?.addStatements(
      new iam.PolicyStatement({
        actions: ['sts:TagSession'],
        principals: [new iam.ServicePrincipal('pods.eks.amazonaws.com')],
        conditions: { StringEquals: { 'aws:SourceAccount': this.account } },
      }),
    );
    new eks.CfnPodIdentityAssociation(this, 'ForwarderPodIdentity', {
      clusterName: props.clusterName,
      namespace: 'ballast',
      serviceAccount: 'ballast-forwarder',
      roleArn: forwarderRole.roleArn,
    });
    new CfnOutput(this, 'EventBusName', { value: bus.eventBusName, description: 'The forwarder publishes here (BALLAST_EVENT_BUS).' });
    new CfnOutput(this, 'ForwarderRoleArn', { value: forwarderRole.roleArn });

    // ---- schedules ----
    const schedulerRole = new iam.Role(this, 'SchedulerRole', {
      assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com', { conditions: { StringEquals: { 'aws:SourceAccount': this.account } } }),
      inlinePolicies: {
        invoke: new iam.PolicyDocument({
          statements: [new iam.PolicyStatement({ actions: ['lambda:InvokeFunction'], resources: [schedule.fn.functionArn] })],
        }),
      },
    });
    const context = '"id": "<aws.scheduler.execution-id>", "time": "<aws.scheduler.scheduled-time>"';
    new scheduler.CfnSchedule(this, 'ReconcileSchedule', {
      name: `${prefix}-reconcile`,
      scheduleExpression: 'rate(1 minute)',
      flexibleTimeWindow: { mode: 'OFF' },
      target: {
        arn: schedule.fn.functionArn,
        roleArn: schedulerRole.roleArn,
        input: `{"action": "reconcile", ${context}}`,
        retryPolicy: { maximumRetryAttempts: 1, maximumEventAgeInSeconds: 120 },
      },
    });
    if (props.headroomOverride) {
      const o = props.headroomOverride;
      new scheduler.CfnSchedule(this, 'HeadroomOverrideSchedule', {
        name: `${prefix}-headroom-${o.pool}`,
        scheduleExpression: o.cron,
        scheduleExpressionTimezone: o.timeZone,
        flexibleTimeWindow: { mode: 'OFF' },
        target: {
          arn: schedule.fn.functionArn,
          roleArn: schedulerRole.roleArn,
          input: `{"action": "headroom", "pool": "${o.pool}", "percent": ${o.percent}, "for": "${o.for}", ${context}}`,
          retryPolicy: { maximumRetryAttempts: 3, maximumEventAgeInSeconds: 600 },
        },
      });
    }

    // ---- cdk-nag: each acknowledged finding with its reason ----
    Validations.of(reconcile).acknowledge(
      {
        id: 'AwsSolutions::AwsSolutions-IAM5[Resource::*]',
        reason: 'DescribeAutoScalingGroups, DescribeScalingActivities, DescribeInstances and DescribeSpotPriceHistory support no resource-level permissions; they are read-only.',
      },
      {
        id: `AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:${this.region}:${this.account}:autoScalingGroup:*:autoScalingGroupName/*]`,
        reason: 'Pools may select ASGs by tag, so names are not known in advance; the mutating actions are conditioned on the ballast.io/pool tag instead.',
      },
    );
    for (const { role, logGroup } of [interruption, schedule, clusterEvents]) {
      const logGroupId = this.resolve((logGroup.node.defaultChild as CfnResource).logicalId);
      Validations.of(role).acknowledge({
        id: `AwsSolutions::AwsSolutions-IAM5[Resource::<${logGroupId}.Arn>:*]`,
        reason: "Log streams are named by Lambda at run time; the wildcard stays within the function's own log group.",
      });
    }
    if (vpcAccess) {
      Validations.of(vpcAccess).acknowledge({
        id: 'AwsSolutions::AwsSolutions-IAM5[Resource::*]',
        reason: 'DescribeNetworkInterfaces supports no resource-level permissions.',
      });
    }
  }
}
