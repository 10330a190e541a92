#!/usr/bin/env node
// The CDK app: one Ballast stack, checked by cdk-nag's AwsSolutions rules.
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { BallastStack } from '../lib/ballast-stack';

// BALLAST_CDK_SKIP_BUILD=1 synthesizes without building the Rust functions (CI checks
// the template and cdk-nag; `cdk deploy` builds them with cargo-lambda, or takes a
// release's zips with -c lambdaZips=DIR).
const app = new App();
if (process.env.BALLAST_CDK_SKIP_BUILD) {
  // Set before any stack exists, so it wins over the CLI's default (bundle every stack).
  app.node.setContext('aws:cdk:bundling-stacks', []);
}
const context = (key: string, fallback?: string): string => {
  const value = app.node.tryGetContext(key) ?? fallback;
  if (value === undefined) throw new Error(`missing context value ${key} (cdk.json or -c ${key}=...)`);
  return String(value);
};
const list = (key: string): string[] => context(key, '').split(',').map((s) => s.trim()).filter(Boolean);

const flag = (key: string, fallback: boolean): boolean => {
  const value = context(key, String(fallback));
  if (value !== 'true' && value !== 'false') throw new Error(`context ${key}: true or false, not ${JSON.stringify(value)}`);
  return value === 'true';
};

new BallastStack(app, `ballast-${context('clusterName')}`, {
  env: { account: context('account'), region: context('region') },
  clusterName: context('clusterName'),
  // Empty: /ballast/CLUSTER/config, where `ballast config push` writes by default.
  configParameterName: context('configParameterName', ''),
  // false: the cluster stays on CONFIG_MAP authentication (map the roles in aws-auth).
  accessEntries: flag('accessEntries', true),
  stateTableName: context('stateTableName', 'ballast-state'),
  vpcId: context('vpcId', ''),
  subnetIds: list('subnetIds'),
  securityGroupIds: list('securityGroupIds'),
  availabilityZones: list('availabilityZones'),
  createVpcEndpoints: flag('createVpcEndpoints', false),
  routeTableIds: list('routeTableIds'),
  headroomOverride: app.node.tryGetContext('headroomOverride'),
  alarmTopicArn: app.node.tryGetContext('alarmTopicArn'),
  alarmEmail: app.node.tryGetContext('alarmEmail'),
  // A directory holding a release's three ballast-VERSION-lambda-FUNCTION-arm64.zip: no Rust build.
  lambdaZips: app.node.tryGetContext('lambdaZips'),
});

Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
