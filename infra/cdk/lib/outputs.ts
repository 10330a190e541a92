// The stack's outputs: the same names and values as infra/sam/template.yaml's Outputs,
// so the getting-started steps and `ballast doctor` read either stack alike
// (tests/tests/outputs.rs compares them).
import { CfnOutput, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';

export interface OutputsOf {
  table: dynamodb.ITable;
  queue: sqs.IQueue;
  deadLetters: sqs.IQueue;
  alarmTopic: sns.ITopic;
  dashboard: cloudwatch.CfnDashboard;
  bus: events.IEventBus;
  forwarderRole: iam.IRole;
  configName: string;
  interfaceEndpoints: string[];
  functionRoles: { interruption: iam.IRole; schedule: iam.IRole; clusterEvents: iam.IRole };
}

export function addOutputs(stack: Stack, o: OutputsOf): void {
  // Named as in SAM; the construct ids differ from the logical ids, which may repeat a
  // resource's (the Dashboard), as CloudFormation keeps outputs apart from resources.
  const out = (name: string, value: string, description?: string) =>
    new CfnOutput(stack, `Output-${name}`, { value, description }).overrideLogicalId(name);
  out('EventBusName', o.bus.eventBusName, 'The forwarder publishes here (infra/k8s forwarder BALLAST_EVENT_BUS).');
  out('EventBusArn', o.bus.eventBusArn);
  out('ForwarderRoleArn', o.forwarderRole.roleArn, "The forwarder's role (EKS Pod Identity, ServiceAccount ballast/ballast-forwarder).");
  out('EventsQueueUrl', o.queue.queueUrl);
  out('DeadLetterQueueUrl', o.deadLetters.queueUrl);
  out('AlarmTopicArn', o.alarmTopic.topicArn);
  out('Dashboard', o.dashboard.ref);
  out('StateTable', o.table.tableName);
  out(
    'VpcEndpointServices',
    `com.amazonaws.${stack.region}.{${o.interfaceEndpoints.join(',')}} (interface), com.amazonaws.${stack.region}.dynamodb (gateway)`,
    'The AWS endpoints the functions call; in private subnets with no NAT, the VPC needs an endpoint for each (createVpcEndpoints makes them).',
  );
  out(
    'ConfigParameter',
    o.configName,
    'The SSM parameter the functions and the forwarder read (infra/k8s BALLAST_CONFIG_PARAMETER); `ballast config push` writes it.',
  );
  const access = 'Map in EKS (access entry) to the group bound to Ballast\'s RBAC.';
  out('InterruptionRoleArn', o.functionRoles.interruption.roleArn, access);
  out('ScheduleRoleArn', o.functionRoles.schedule.roleArn, access);
  out('ClusterEventsRoleArn', o.functionRoles.clusterEvents.roleArn, access);
}
