// Evaluates AWS requests against IAM policies offline with @cloud-copilot/iam-simulate.
// stdin: JSON [{ id, principal, action, resource, context, identityPolicies: [{ name, policy }],
// resourcePolicy? }]; stdout: JSON [{ id, result ('Allowed' | 'ExplicitlyDenied' |
// 'ImplicitlyDenied'), errors? }]. The tests (tests/tests/iam.rs) decide what must hold.
import { runSimulation } from '@cloud-copilot/iam-simulate';

const input = JSON.parse(await new Promise((resolve, reject) => {
  let text = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (chunk) => (text += chunk));
  process.stdin.on('end', () => resolve(text));
  process.stdin.on('error', reject);
}));

const out = [];
for (const c of input) {
  const simulation = {
    identityPolicies: c.identityPolicies ?? [],
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    resourcePolicy: c.resourcePolicy ?? undefined,
    request: {
      principal: c.principal,
      action: c.action,
      resource: { resource: c.resource, accountId: c.resourceAccount ?? '123456789012' },
      contextVariables: c.context ?? {},
    },
  };
  const response = await runSimulation(simulation, {});
  if (response.resultType === 'error') {
    out.push({ id: c.id, result: 'Error', errors: response.errors });
  } else {
    out.push({ id: c.id, result: response.overallResult });
  }
}
process.stdout.write(JSON.stringify(out));
