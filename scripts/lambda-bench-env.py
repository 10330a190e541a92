"""The world scripts/bench-package starts the functions in: moto (in this process, so the
EKS cluster it describes can be pointed at a real API server) and the TokenReview webhook
that stands for the EKS authenticator.

moto: the pool's table, launch template and ASGs, and the EKS cluster `bench`, whose
endpoint and certificate authority are those of the local kube-apiserver (moto's own
are a fake hostname and random bytes). The webhook accepts a bearer token of the form
`aws-iam-authenticator` accepts (`k8s-aws-v1.` + base64url of a presigned STS
GetCallerIdentity URL naming the cluster in `x-k8s-aws-id`) and maps it to the group the
functions' IAM role maps to through the EKS access entry. It checks the form, not the
signature (that would need STS).

Usage: lambda-bench-env.py MOTO_PORT WEBHOOK_PORT APISERVER_URL CA_FILE READY_FILE
Writes READY_FILE (four spot instances' ids, one a line: one per interruption run, the fourth for the arm64 run) when both serve, and appends each
review's verdict to READY_FILE.reviews; runs until killed."""
import base64, json, sys, threading, time, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

moto_port, webhook_port, apiserver, ca_file, ready_file = sys.argv[1:6]
CLUSTER, REGION, ACCOUNT = "bench", "eu-west-1", "123456789012"
GROUP = "ballast:functions"


def token_ok(token):
    prefix = "k8s-aws-v1."
    if not token.startswith(prefix):
        return False
    raw = token[len(prefix):]
    try:
        url = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except Exception:
        return False
    parsed = urllib.parse.urlparse(url)
    query = urllib.parse.parse_qs(parsed.query)
    return (parsed.scheme == "https" and parsed.hostname == f"sts.{REGION}.amazonaws.com"
            and query.get("Action") == ["GetCallerIdentity"] and "X-Amz-Signature" in query
            and "x-k8s-aws-id" in query.get("X-Amz-SignedHeaders", [""])[0].split(";"))


class Webhook(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        ok = token_ok(review.get("spec", {}).get("token", ""))
        with open(ready_file + ".reviews", "a") as f:
            f.write("accepted\n" if ok else "rejected\n")
        status = {"authenticated": ok}
        if ok:
            status["user"] = {"username": "arn:aws:sts::123456789012:assumed-role/ballast-functions/bench",
                              "uid": "aws-iam-authenticator:bench", "groups": [GROUP]}
        body = json.dumps({"apiVersion": review.get("apiVersion"), "kind": "TokenReview", "status": status}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


webhook = ThreadingHTTPServer(("127.0.0.1", int(webhook_port)), Webhook)
threading.Thread(target=webhook.serve_forever, daemon=True).start()

import boto3
from moto.server import ThreadedMotoServer
from moto.eks.models import eks_backends

server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(moto_port), verbose=False)
server.start()
kw = dict(endpoint_url=f"http://127.0.0.1:{moto_port}", region_name=REGION,
          aws_access_key_id="test", aws_secret_access_key="test")
boto3.client("dynamodb", **kw).create_table(
    TableName="ballast-bench", BillingMode="PAY_PER_REQUEST",
    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
boto3.client("ec2", **kw).create_launch_template(
    LaunchTemplateName="bench", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "m5.large"})
asg = boto3.client("autoscaling", **kw)


def tag(name):
    return [{"Key": "ballast.io/pool", "Value": "general", "ResourceId": name,
             "ResourceType": "auto-scaling-group", "PropagateAtLaunch": False}]


asg.create_auto_scaling_group(
    AutoScalingGroupName="bench-spot", MinSize=0, MaxSize=20, DesiredCapacity=4,
    AvailabilityZones=["eu-west-1a"], Tags=tag("bench-spot"),
    MixedInstancesPolicy={
        "LaunchTemplate": {"LaunchTemplateSpecification": {"LaunchTemplateName": "bench"},
                           "Overrides": [{"InstanceType": "m5.large"}]},
        "InstancesDistribution": {"OnDemandBaseCapacity": 0, "OnDemandPercentageAboveBaseCapacity": 0}})
asg.create_auto_scaling_group(
    AutoScalingGroupName="bench-od", MinSize=0, MaxSize=20, DesiredCapacity=1,
    AvailabilityZones=["eu-west-1a"], Tags=tag("bench-od"), LaunchTemplate={"LaunchTemplateName": "bench"})
groups = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["bench-spot"])["AutoScalingGroups"]
instances = [i["InstanceId"] for i in groups[0]["Instances"]][:4]

boto3.client("eks", **kw).create_cluster(
    name=CLUSTER, roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", resourcesVpcConfig={"subnetIds": []})
cluster = eks_backends[ACCOUNT][REGION].clusters[CLUSTER]
cluster.endpoint = apiserver
cluster.certificate_authority = {"data": base64.b64encode(open(ca_file, "rb").read()).decode()}
described = boto3.client("eks", **kw).describe_cluster(name=CLUSTER)["cluster"]
assert described["endpoint"] == apiserver, described["endpoint"]

with open(ready_file + ".tmp", "w") as f:
    f.write("\n".join(instances) + "\n")
import os
os.rename(ready_file + ".tmp", ready_file)
while True:
    time.sleep(3600)
