// The same system as infra/sam/template.yaml: three Rust functions (built with
// cargo-lambda, or a release's zips), the rules and queue that feed them, the schedules, the forwarder's
// bus, the state table, the EKS access; one least-privilege role per function. The
// config is an SSM parameter `ballast config push` writes before deploying.
import { CfnResource, Duration, RemovalPolicy, Stack, StackProps, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwactions from 'aws-cdk-lib/aws-cloudwatch-actions';
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
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { releaseZips, rustFunction } from './function-code';
import { addOutputs } from './outputs';

export interface HeadroomOverride {
  cron: string;
  timeZone: string;
  pool: string;
  percent: number;
  for: string;
}

export interface BallastProps extends StackProps {
  clusterName: string;
  /** The SSM parameter holding ballast.yaml; empty for /ballast/CLUSTER/config. */
  configParameterName: string;
  /** Create the EKS access entries of the function roles (false: CONFIG_MAP authentication). */
  accessEntries: boolean;
  stateTableName: string;
  vpcId: string;
  subnetIds: string[];
  securityGroupIds: string[];
  availabilityZones: string[];
  /** Create the VPC endpoints the functions need (interface, and DynamoDB's gateway in routeTableIds). */
  createVpcEndpoints: boolean;
  routeTableIds: string[];
  headroomOverride?: HeadroomOverride;
  /** An SNS topic of your own for the alarms; without one the stack creates one. */
  alarmTopicArn?: string;
  /** An e-mail subscribed to the created alarm topic. */
  alarmEmail?: string;
  /** A directory with a release's ballast-VERSION-lambda-FUNCTION-arm64.zip: deploy those, build nothing. */
  lambdaZips?: string;
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
  // Failures drive the fallback; successes date each launch, for the lead time a wait
  // target learns (one rule: the same source, the same queue).
  'launch-unsuccessful': {
    source: ['aws.autoscaling'],
    detailType: ['EC2 Instance Launch Unsuccessful', 'EC2 Instance Launch Successful'],
  },
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
  detailType: ['Pool Demand Changed', 'Pods Unschedulable', 'Node Lifecycle', 'Pool Waits Measured'],
};

/** The AWS endpoints the functions call: in private subnets with no NAT, one VPC endpoint each. */
export const INTERFACE_ENDPOINTS = ['ssm', 'sts', 'eks', 'autoscaling', 'ec2', 'sqs', 'events', 'logs'];

// At least the longest drain_timeout plus 120 s (the lease): `ballast config check --function-timeout`.
const FUNCTION_TIMEOUT = Duration.seconds(300);
// The interruption function's most concurrent invocations (the SQS event source's minimum is 2).
const INTERRUPTION_MAX_CONCURRENCY = 2;
/** The events queue's maxReceiveCount, also told to the interruption function. */
const MAX_RECEIVES = 10;

/** The metrics the functions emit (functions/lambda/src/metrics.rs), namespace Ballast. */
const DECISION_KINDS = [
  'SetDesiredCapacity',
  'TerminateInstance',
  'CordonNode',
  'UncordonNode',
  'DrainNode',
  'RecordLifecycleHeartbeat',
  'CompleteLifecycleAction',
  'SetHeadroomReplicas',
];


export class BallastStack extends Stack {
  constructor(scope: Construct, id: string, props: BallastProps) {
    super(scope, id, props);
    // Every name is ballast-CLUSTER-SUFFIX; the longest (ballast-CLUSTER-launch-unsuccessful,
    // an EventBridge rule) must fit AWS's 64 characters, as in the SAM template.
    if (!/^[a-zA-Z0-9][a-zA-Z0-9-]{0,35}$/.test(props.clusterName)) {
      throw new Error(
        `clusterName ${JSON.stringify(props.clusterName)}: 1 to 36 letters, digits or hyphens, starting with a letter or digit ` +
          '(it names every resource, ballast-CLUSTER-launch-unsuccessful the longest, within the 64 characters AWS allows)',
      );
    }
    checkVpc(props, this.region);
    const zips = props.lambdaZips ? releaseZips(props.lambdaZips) : undefined;
    const prefix = `ballast-${props.clusterName}`;

    // ---- configuration and state ----
    // Written by `ballast config push`, not by this stack: the functions follow its changes
    // (the config-changed rule) without a redeploy.
    const configName = props.configParameterName || `/ballast/${props.clusterName}/config`;
    if (!/^\/[a-zA-Z0-9_.\/-]{1,1010}$/.test(configName)) {
      throw new Error(`configParameterName ${JSON.stringify(configName)}: a parameter name starting with / (letters, digits, _ . - /)`);
    }
    const configArn = `arn:${this.partition}:ssm:${this.region}:${this.account}:parameter${configName}`;
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
      // Longer than the source queue's retention: a message's age counts from its first enqueue.
      retentionPeriod: Duration.days(14),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      // Only the events queue may redrive here (named, not referenced: it refers to this queue).
      redriveAllowPolicy: {
        redrivePermission: sqs.RedrivePermission.BY_QUEUE,
        sourceQueues: [
          sqs.Queue.fromQueueArn(this, 'EventsQueueByName', `arn:${this.partition}:sqs:${this.region}:${this.account}:${prefix}-events`),
        ],
      },
    });
    const queue = new sqs.Queue(this, 'EventsQueue', {
      queueName: `${prefix}-events`,
      // Six times the function timeout, as Lambda's SQS integration recommends. Longer
      // would hide a crashed batch's Spot warnings (worthless after two minutes) and
      // lifecycle actions for as long. Only a crashed or timed-out invocation waits this
      // long: a retryable failure is made visible again within seconds by the function.
      visibilityTimeout: Duration.seconds(6 * FUNCTION_TIMEOUT.toSeconds()),
      // Four days: at least 6.4 times visibilityTimeout x maxReceiveCount (54,000 s at the
      // longest timeout), so a message that keeps failing is dead-lettered before it expires.
      retentionPeriod: Duration.days(4),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      // With the function's backoff (5 s doubling to 5 min) ten receives span ~20 min:
      // longer than any lease (drain_timeout <= 15 min, plus 2 min) a retry waits for.
      deadLetterQueue: { queue: deadLetters, maxReceiveCount: MAX_RECEIVES },
    });
    const alarmTopic = props.alarmTopicArn
      ? sns.Topic.fromTopicArn(this, 'AlarmTopic', props.alarmTopicArn)
      : this.alarmTopic(prefix, props.alarmEmail);
    const deadLetterAlarm = new cloudwatch.Alarm(this, 'DeadLetterAlarm', {
      alarmName: `${prefix}-dead-letters`,
      alarmDescription:
        'Events Ballast could not handle (or failed asynchronous invocations) are waiting in the dead-letter queue; read them and their ballast-error attribute.',
      metric: deadLetters.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(5), statistic: 'Maximum' }),
      threshold: 0,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    deadLetterAlarm.addAlarmAction(new cwactions.SnsAction(alarmTopic));
    // A crash, a timeout or a config every cold start refuses brings the whole batch back
    // only after the queue's visibility timeout, and to the dead-letter queue only after
    // ten of them: this says so within minutes. Twenty minutes is past the longest wait of
    // a working deployment (a lifecycle action behind a 15-minute drain and the lease).
    const waitingAlarm = new cloudwatch.Alarm(this, 'EventsWaitingAlarm', {
      alarmName: `${prefix}-events-waiting`,
      alarmDescription:
        "An event has waited more than 20 minutes in Ballast's events queue; the interruption function is failing (its logs and Errors metric say why) or cannot keep up.",
      metric: queue.metricApproximateAgeOfOldestMessage({ period: Duration.minutes(5), statistic: 'Maximum' }),
      threshold: 1200,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    waitingAlarm.addAlarmAction(new cwactions.SnsAction(alarmTopic));
    // Only this account's events (a foreign one never reaches the queue nor its alarm);
    // the target adds an allow per rule (aws:SourceArn), the deny below refuses the rest.
    const queueRules = Object.entries(QUEUE_RULES).map(
      ([name, pattern]) =>
        new events.Rule(this, `Rule-${name}`, {
          ruleName: `${prefix}-${name}`,
          eventPattern: { ...pattern, account: [this.account] },
          targets: [new targets.SqsQueue(queue)],
        }),
    );

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
        // The history: a cold start on a hand-written bad version runs on the newest good one.
        new iam.PolicyStatement({ sid: 'ReadConfig', actions: ['ssm:GetParameter', 'ssm:GetParameterHistory'], resources: [configArn] }),
        // Endpoint and CA at start (BALLAST_CLUSTER_ACCESS=eks, the default).
        new iam.PolicyStatement({
          sid: 'FindCluster',
          actions: ['eks:DescribeCluster'],
          resources: [`arn:${this.partition}:eks:${this.region}:${this.account}:cluster/${props.clusterName}`],
        }),
        new iam.PolicyStatement({
          sid: 'State',
          actions: ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:BatchGetItem', 'dynamodb:BatchWriteItem'],
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
          // Only ASGs of this cluster (ballast.io/cluster) that belong to a pool
          // (ballast.io/pool): another cluster's Ballast in this account cannot touch them.
          conditions: {
            StringEquals: { 'aws:ResourceTag/ballast.io/cluster': props.clusterName },
            Null: { 'aws:ResourceTag/ballast.io/pool': 'false' },
          },
        }),
        // These Describe APIs support no resource-level permissions: the region bounds them.
        // DescribeInstances: an instance's market, and the ASG that launched one an event
        // names after it left (its aws:autoscaling:groupName tag), for routing.
        new iam.PolicyStatement({
          sid: 'ReadAsgsAndInstances',
          actions: ['autoscaling:DescribeAutoScalingGroups', 'autoscaling:DescribeScalingActivities', 'ec2:DescribeInstances'],
          resources: ['*'],
          conditions: { StringEquals: { 'aws:RequestedRegion': this.region } },
        }),
      ],
    });
    const ec2Arn = (what: string) => `arn:${this.partition}:ec2:${this.region}:${this.account}:${what}`;
    const interfaces = ec2Arn('network-interface/*');
    const vpcAccess = vpc
      ? new iam.ManagedPolicy(this, 'VpcAccessPolicy', {
          description: 'Ballast functions in the VPC (private EKS endpoint): Lambda attaches their network interfaces.',
          statements: [
            // Interface ids are chosen at creation; the subnets and security groups confine them.
            new iam.PolicyStatement({
              sid: 'CreateInterfacesInTheGivenSubnets',
              actions: ['ec2:CreateNetworkInterface'],
              resources: [
                interfaces,
                ...props.subnetIds.map((s) => ec2Arn(`subnet/${s}`)),
                ...props.securityGroupIds.map((g) => ec2Arn(`security-group/${g}`)),
              ],
            }),
            new iam.PolicyStatement({
              sid: 'ManageInterfacesInTheVpc',
              actions: ['ec2:DeleteNetworkInterface', 'ec2:AssignPrivateIpAddresses', 'ec2:UnassignPrivateIpAddresses'],
              resources: [interfaces],
              conditions: { ArnEquals: { 'ec2:Vpc': ec2Arn(`vpc/${props.vpcId}`) } },
            }),
            new iam.PolicyStatement({
              sid: 'DescribeInterfaces',
              actions: ['ec2:DescribeNetworkInterfaces'],
              resources: ['*'],
              conditions: { StringEquals: { 'aws:RequestedRegion': this.region } },
            }),
          ],
        })
      : undefined;

    const makeFunction = (
      name: string,
      reserved: number | undefined,
      extra: iam.PolicyStatement[],
      environment: Record<string, string> = {},
      asynchronous?: { retryAttempts: number; maxEventAge: Duration },
    ) => {
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
              ...(asynchronous
                ? [new iam.PolicyStatement({ sid: 'FailedInvocations', actions: ['sqs:SendMessage'], resources: [deadLetters.queueArn] })]
                : []),
              ...extra,
            ],
          }),
        },
      });
      const fn = rustFunction(this, name, name, {
        functionName,
        memorySize: 128,
        timeout: FUNCTION_TIMEOUT,
        role,
        logGroup,
        // The functions log at the level and in the format these set (AWS_LAMBDA_LOG_LEVEL,
        // AWS_LAMBDA_LOG_FORMAT), as the SAM template's LoggingConfig; no RUST_LOG, which
        // would override them.
        loggingFormat: lambda.LoggingFormat.JSON,
        applicationLogLevelV2: lambda.ApplicationLogLevel.INFO,
        systemLogLevelV2: lambda.SystemLogLevel.WARN,
        reservedConcurrentExecutions: reserved,
        vpc,
        securityGroups: vpc ? securityGroups : undefined,
        environment: {
          BALLAST_CONFIG_PARAMETER: configName,
          BALLAST_ACCOUNT_ID: this.account,
          ...environment,
        },
      }, zips?.[name]);
      if (asynchronous) {
        // Invoked asynchronously: what still fails after the retries lands in the
        // dead-letter queue, whose alarm goes off. (Written out, not SqsDestination, whose
        // grant adds queue reads nothing uses.)
        new lambda.CfnEventInvokeConfig(this, `${name}-async`, {
          functionName: fn.functionName,
          qualifier: '$LATEST',
          maximumRetryAttempts: asynchronous.retryAttempts,
          maximumEventAgeInSeconds: asynchronous.maxEventAge.toSeconds(),
          destinationConfig: { onFailure: { destination: deadLetters.queueArn } },
        });
      }
      if (props.accessEntries) {
        // The role in the cluster, as the group infra/k8s/functions-rbac.yaml binds.
        new eks.CfnAccessEntry(this, `${name}-access`, {
          clusterName: props.clusterName,
          principalArn: role.roleArn,
          kubernetesGroups: ['ballast:functions'],
          type: 'STANDARD',
        });
      }
      return { fn, role, logGroup };
    };

    // Leases serialise per pool; the event source's maxConcurrency bounds storms, and as
    // many are reserved so that other functions of the account cannot starve it.
    const interruption = makeFunction(
      'interruption',
      INTERRUPTION_MAX_CONCURRENCY,
      [
        new iam.PolicyStatement({ sid: 'DeadLetters', actions: ['sqs:SendMessage'], resources: [deadLetters.queueArn] }),
        // A warning is routed by its instance's ASG (and that ASG's tags, for tag
        // selectors). No resource-level permissions: the region bounds them. (An instance
        // gone from its ASG is routed by ec2:DescribeInstances, which the reconcile policy
        // grants every function.)
        new iam.PolicyStatement({
          sid: 'RouteByInstance',
          actions: ['autoscaling:DescribeAutoScalingInstances', 'autoscaling:DescribeTags'],
          resources: ['*'],
          conditions: { StringEquals: { 'aws:RequestedRegion': this.region } },
        }),
      ],
      // On the queue's last receive a message still failing is dead-lettered with its errors.
      { BALLAST_DEAD_LETTER_QUEUE_URL: deadLetters.queueUrl, BALLAST_MAX_RECEIVES: String(MAX_RECEIVES) },
    );
    interruption.fn.addEventSource(
      new eventsources.SqsEventSource(queue, {
        batchSize: 10,
        maxBatchingWindow: Duration.seconds(1),
        reportBatchItemFailures: true,
        maxConcurrency: INTERRUPTION_MAX_CONCURRENCY,
      }),
    );
    // Room for a tick (covered at once by a run holding the pool's lease) beside a draining
    // run and an override waiting for the lease: a throttled tick would expire into the DLQ.
    const schedule = makeFunction('schedule', 3, [], {}, { retryAttempts: 1, maxEventAge: Duration.minutes(5) });
    // A forwarder event for a pool whose lease a drain holds waits it out: room for such
    // waits beside the other pools' events.
    const clusterEvents = makeFunction('cluster-events', 4, [], {}, { retryAttempts: 2, maxEventAge: Duration.minutes(10) });

    // A new config version reaches every function within seconds: the two invoked directly,
    // the interruption function through its queue.
    const configChanged = new events.Rule(this, 'ConfigChangedRule', {
      ruleName: `${prefix}-config-changed`,
      eventPattern: {
        account: [this.account],
        source: ['aws.ssm'],
        detailType: ['Parameter Store Change'],
        detail: { name: [configName], operation: ['Create', 'Update'] },
      },
      targets: [new targets.LambdaFunction(schedule.fn), new targets.LambdaFunction(clusterEvents.fn), new targets.SqsQueue(queue)],
    });
    queue.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'OnlyTheRules',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: ['sqs:SendMessage'],
        resources: [queue.queueArn],
        conditions: { ArnNotEquals: { 'aws:SourceArn': [...queueRules, configChanged].map((r) => r.ruleArn) } },
      }),
    );

    // `ballast dead-letters --replay` acts on what it reads there: only the three functions
    // (their own dead letters, the on-failure destinations) may write to the dead-letter queue.
    const functionRoles = [interruption, schedule, clusterEvents].map(({ role }) => role.roleArn);
    deadLetters.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'TheFunctions',
        principals: functionRoles.map((arn) => new iam.ArnPrincipal(arn)),
        actions: ['sqs:SendMessage'],
        resources: [deadLetters.queueArn],
      }),
    );
    deadLetters.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'OnlyTheFunctions',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: ['sqs:SendMessage'],
        resources: [deadLetters.queueArn],
        conditions: { ArnNotEquals: { 'aws:PrincipalArn': functionRoles } },
      }),
    );

    if (props.createVpcEndpoints && vpc) {
      // Private subnets without a route to AWS: the endpoints the functions call.
      for (const service of INTERFACE_ENDPOINTS) {
        new ec2.CfnVPCEndpoint(this, `Endpoint-${service}`, {
          vpcEndpointType: 'Interface',
          serviceName: `com.amazonaws.${this.region}.${service}`,
          vpcId: props.vpcId,
          subnetIds: props.subnetIds,
          securityGroupIds: props.securityGroupIds,
          privateDnsEnabled: true,
        });
      }
      new ec2.CfnVPCEndpoint(this, 'Endpoint-dynamodb', {
        vpcEndpointType: 'Gateway',
        serviceName: `com.amazonaws.${this.region}.dynamodb`,
        vpcId: props.vpcId,
        routeTableIds: props.routeTableIds,
      });
    }

    // ---- the forwarder's bus ----
    const bus = new events.EventBus(this, 'ForwarderBus', { eventBusName: prefix });
    new events.Rule(this, 'ForwarderRule', {
      ruleName: `${prefix}-forwarder`,
      eventBus: bus,
      eventPattern: { ...FORWARDER_PATTERN, account: [this.account] },
      targets: [new targets.LambdaFunction(clusterEvents.fn)],
    });
    // The forwarder's AWS identity (EKS Pod Identity): it may put events on this bus and
    // read the config. Only this cluster's ballast/ballast-forwarder may assume it (the
    // session tags EKS Pod Identity sets), not any Pod Identity association of the account.
    const forwarderRole = new iam.Role(this, 'ForwarderRole', {
      assumedBy: new iam.ServicePrincipal('pods.eks.amazonaws.com', {
        conditions: {
          StringEquals: {
            'aws:SourceAccount': this.account,
            'aws:RequestTag/eks-cluster-arn': `arn:${this.partition}:eks:${this.region}:${this.account}:cluster/${props.clusterName}`,
            'aws:RequestTag/eks-cluster-name': props.clusterName,
            'aws:RequestTag/kubernetes-namespace': 'ballast',
            'aws:RequestTag/kubernetes-service-account': 'ballast-forwarder',
          },
        },
      }).withSessionTags(),
      inlinePolicies: {
        'put-events': new iam.PolicyDocument({
          statements: [
            new iam.PolicyStatement({ actions: ['events:PutEvents'], resources: [bus.eventBusArn] }),
            // The history: a cold start on a hand-written bad version runs on the newest good one.
            new iam.PolicyStatement({ sid: 'ReadConfig', actions: ['ssm:GetParameter', 'ssm:GetParameterHistory'], resources: [configArn] }),
          ],
        }),
      },
    });
    // Only the forwarder's role may put events on the bus (an allow for it, a deny for
    // every other principal, the account's own included).
    bus.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'ForwarderOnly',
        principals: [new iam.ArnPrincipal(forwarderRole.roleArn)],
        actions: ['events:PutEvents'],
        resources: [bus.eventBusArn],
      }),
    );
    bus.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'NobodyElse',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: ['events:PutEvents'],
        resources: [bus.eventBusArn],
        conditions: { ArnNotEquals: { 'aws:PrincipalArn': forwarderRole.roleArn } },
      }),
    );
    new eks.CfnPodIdentityAssociation(this, 'ForwarderPodIdentity', {
      clusterName: props.clusterName,
      namespace: 'ballast',
      serviceAccount: 'ballast-forwarder',
      roleArn: forwarderRole.roleArn,
    });
    // The forwarder publishes every pool's demand at least every heartbeat (5 min): fifteen
    // minutes with no event on its rule means it is down, or cannot reach or write to the
    // bus (its Pod Identity, the NetworkPolicy). No data is silence too.
    const silentAlarm = new cloudwatch.Alarm(this, 'ForwarderSilentAlarm', {
      alarmName: `${prefix}-forwarder-silent`,
      alarmDescription:
        'No event from the in-cluster forwarder for 15 minutes; Ballast falls back to listing pods itself. Check the ballast-forwarder pod, its logs and its Pod Identity association.',
      metric: new cloudwatch.Metric({
        namespace: 'AWS/Events',
        metricName: 'TriggeredRules',
        dimensionsMap: { EventBusName: prefix, RuleName: `${prefix}-forwarder` },
        statistic: 'Sum',
        period: Duration.minutes(5),
      }),
      threshold: 1,
      evaluationPeriods: 3,
      datapointsToAlarm: 3,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });
    silentAlarm.addAlarmAction(new cwactions.SnsAction(alarmTopic));

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
        // One override: named without its pool, whose name would not always fit 64 characters.
        name: `${prefix}-headroom`,
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

    const dashboard = this.dashboard(prefix, deadLetters);
    // The outputs of the SAM template, by the same names.
    const roles = { interruption: interruption.role, schedule: schedule.role, clusterEvents: clusterEvents.role };
    addOutputs(this, { table, queue, deadLetters, alarmTopic, dashboard, bus, forwarderRole, configName, interfaceEndpoints: INTERFACE_ENDPOINTS, functionRoles: roles });

    // ---- cdk-nag: each acknowledged finding with its reason ----
    Validations.of(reconcile).acknowledge(
      {
        id: 'AwsSolutions::AwsSolutions-IAM5[Resource::*]',
        reason: 'DescribeAutoScalingGroups, DescribeScalingActivities and DescribeInstances support no resource-level permissions; they are read-only.',
      },
      {
        id: `AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:${this.region}:${this.account}:autoScalingGroup:*:autoScalingGroupName/*]`,
        reason: "Pools may select ASGs by tag, so names are not known in advance; the mutating actions are conditioned on the ASG's ballast.io/cluster and ballast.io/pool tags instead.",
      },
    );
    Validations.of(interruption.role).acknowledge({
      id: 'AwsSolutions::AwsSolutions-IAM5[Resource::*]',
      reason: 'DescribeAutoScalingInstances and DescribeTags support no resource-level permissions; they are read-only.',
    });
    for (const { role, logGroup } of [interruption, schedule, clusterEvents]) {
      const logGroupId = this.resolve((logGroup.node.defaultChild as CfnResource).logicalId);
      Validations.of(role).acknowledge({
        id: `AwsSolutions::AwsSolutions-IAM5[Resource::<${logGroupId}.Arn>:*]`,
        reason: "Log streams are named by Lambda at run time; the wildcard stays within the function's own log group.",
      });
    }
    if (vpcAccess) {
      Validations.of(vpcAccess).acknowledge(
        {
          id: 'AwsSolutions::AwsSolutions-IAM5[Resource::*]',
          reason: 'DescribeNetworkInterfaces supports no resource-level permissions.',
        },
        {
          id: `AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:${this.region}:${this.account}:network-interface/*]`,
          reason:
            'Lambda creates the interfaces, so their ids are not known in advance: creation is confined to the given subnets and security groups, the other actions to the VPC (ec2:Vpc).',
        },
      );
    }
  }

  /** The alarm topic, when none is given: TLS only, CloudWatch may publish. */
  private alarmTopic(prefix: string, email?: string): sns.ITopic {
    const topic = new sns.Topic(this, 'DeadLetterAlarmTopic', { topicName: `${prefix}-alarms`, enforceSSL: true });
    topic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'AlarmsPublish',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [topic.topicArn],
        conditions: { ArnLike: { 'aws:SourceArn': `arn:${this.partition}:cloudwatch:${this.region}:${this.account}:alarm:${prefix}-*` } },
      }),
    );
    if (email) topic.addSubscription(new subscriptions.EmailSubscription(email));
    Validations.of(topic).acknowledge({
      id: 'AwsSolutions::AwsSolutions-SNS2',
      reason:
        'CloudWatch cannot publish to a topic under the AWS managed SNS key, and alarm notifications carry no data beyond the alarm name and state.',
    });
    return topic;
  }

  /** Decisions by kind, fallback units, headroom replicas, API errors, reconcile duration, dead letters, surplus named. */
  private dashboard(prefix: string, deadLetters: sqs.IQueue): cloudwatch.CfnDashboard {
    const search = (dimensions: string, metric: string, stat: string, period: number) =>
      `SEARCH('{Ballast,${dimensions}} MetricName=${metric}', '${stat}', ${period})`;
    const quoted = (names: string[]) => `(${names.map((n) => `"${n}"`).join(' OR ')})`;
    const widget = (x: number, y: number, title: string, stat: string, period: number, metrics: unknown[], stacked = false) => ({
      type: 'metric',
      x,
      y,
      width: 12,
      height: 6,
      properties: { title, region: this.region, stat, period, view: 'timeSeries', stacked, metrics },
    });
    const expression = (id: string, expr: string) => [{ expression: expr, id }];
    const body = {
      widgets: [
        widget(0, 0, 'Decisions by kind', 'Sum', 300, [expression('kinds', search('Pool', quoted(DECISION_KINDS), 'Sum', 300))], true),
        widget(12, 0, 'Fallback units (on-demand instances standing in for spot)', 'Maximum', 60, [
          expression('fallback', search('Pool', '"FallbackUnits"', 'Maximum', 60)),
        ]),
        widget(0, 6, 'Headroom replicas (pause pods)', 'Maximum', 60, [expression('headroom', search('Pool', '"HeadroomReplicas"', 'Maximum', 60))]),
        widget(12, 6, 'API errors', 'Sum', 300, [
          expression('errors', search('Pool', '"ApiErrors"', 'Sum', 300)),
          expression('batch', search('Function', '"BatchErrors"', 'Sum', 300)),
        ]),
        widget(0, 12, 'Reconcile duration (ms)', 'Maximum', 300, [
          expression('duration', search('Pool,Function', '"ReconcileDuration"', 'Maximum', 300)),
        ]),
        widget(12, 12, 'Dead letters', 'Maximum', 300, [['AWS/SQS', 'ApproximateNumberOfMessagesVisible', 'QueueName', deadLetters.queueName]]),
        widget(0, 18, 'Possible surplus left to cluster-autoscaler (instances named)', 'Sum', 300, [
          expression('surplus', search('Pool', '"SurplusNamed"', 'Sum', 300)),
        ]),
      ],
    };
    return new cloudwatch.CfnDashboard(this, 'Dashboard', { dashboardName: prefix, dashboardBody: this.toJsonString(body) });
  }
}

/** VPC mode is whole and its availability zones fit the subnets and the region, before synth. */
export function checkVpc(
  props: Pick<BallastProps, 'vpcId' | 'subnetIds' | 'securityGroupIds' | 'availabilityZones' | 'createVpcEndpoints' | 'routeTableIds'>,
  region: string,
): void {
  if (props.createVpcEndpoints && !props.subnetIds.length) {
    throw new Error('createVpcEndpoints needs subnetIds, vpcId and securityGroupIds (the functions\' VPC)');
  }
  if (props.createVpcEndpoints && !props.routeTableIds.length) {
    throw new Error('createVpcEndpoints needs routeTableIds (the DynamoDB gateway endpoint)');
  }
  if (!props.subnetIds.length) return;
  if (!props.vpcId || !props.securityGroupIds.length) {
    throw new Error('subnetIds needs vpcId (the VPC the subnets are in) and securityGroupIds');
  }
  const zones = props.availabilityZones;
  // The CDK assigns the subnets to the zones in order, as many per zone: a wrong zone
  // would only show as a failed deploy (or a function in one zone only).
  if (!zones.length) {
    throw new Error('subnetIds needs availabilityZones (the zones of the subnets, in the same order)');
  }
  const wrong = zones.filter((z) => !z.startsWith(region) || !/^[a-z]{2}(-[a-z]+)+-\d[a-z]$/.test(z));
  if (wrong.length) {
    throw new Error(`availabilityZones ${wrong.join(', ')}: not zones of the stack's region ${region}`);
  }
  if (new Set(zones).size !== zones.length) {
    throw new Error(`availabilityZones ${zones.join(', ')}: a zone is given twice`);
  }
  if (props.subnetIds.length % zones.length !== 0) {
    throw new Error(
      `${props.subnetIds.length} subnetIds over ${zones.length} availabilityZones: give as many subnets in each zone, in the zones' order`,
    );
  }
}
