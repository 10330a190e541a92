#!/usr/bin/env python3
"""The SAM template as plain CloudFormation, offline, by aws-sam-translator (the
transform `sam validate` runs). Prints JSON; intrinsics and conditions stay as they are.

    python translate.py infra/sam/template.yaml > template.json
"""
import json
import os
import sys

from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse


def main() -> None:
    # The translator asks boto for a region; the output keeps ${AWS::Region} anyway.
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-1")
    with open(sys.argv[1], encoding="utf-8") as f:
        sam = yaml_parse(f.read())
    # A local CodeUri becomes the S3 location `sam package` would upload it to (as
    # `sam validate` does): the code itself is not part of the wiring.
    for logical_id, resource in sam.get("Resources", {}).items():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function" and isinstance(props.get("CodeUri"), str):
            if not props["CodeUri"].startswith("s3://"):
                props["CodeUri"] = f"s3://ballast-artifacts/{logical_id}.zip"
    # No managed policies are referenced by name (every role is explicit): no IAM lookup.
    translated = Translator({}, Parser()).translate(sam, parameter_values={}, get_managed_policy_map=dict)
    json.dump(translated, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
