//! Both stacks give the same outputs: the same names, and, deployed with the same names
//! (the VPC variants: cluster `test`, table `ballast-test-state`), the same values. The
//! getting-started steps, `ballast doctor` and the rehearsal read either stack alike.

use ballast_tests::templates::{rendered, Template, Variant, ACCOUNT};

fn names(t: &Template) -> Vec<&str> {
    t.outputs.keys().map(String::as_str).collect()
}

#[test]
fn the_sam_and_cdk_stacks_give_the_same_outputs() {
    for (sam, cdk) in [(Variant::Sam, Variant::Cdk), (Variant::SamVpc, Variant::CdkVpc)] {
        let (Some(s), Some(c)) = (rendered(sam), rendered(cdk)) else { continue };
        assert!(names(&s).len() >= 13, "{}: {:?}", sam.name(), names(&s));
        assert_eq!(names(&s), names(&c), "output names of {} and {}", sam.name(), cdk.name());
        if cdk == Variant::CdkVpc {
            let differ: Vec<String> = s
                .outputs
                .iter()
                .filter(|(k, v)| match k.as_str() {
                    // The forwarder's role is unnamed in both: CloudFormation names it from
                    // the logical id, which differs; both are a role of the account.
                    "ForwarderRoleArn" => ![v, &c.outputs[*k]].iter().all(|v| {
                        v.as_str().is_some_and(|a| a.starts_with(&format!("arn:aws:iam::{ACCOUNT}:role/ForwarderRole")))
                    }),
                    _ => c.outputs.get(*k) != Some(v),
                })
                .map(|(k, v)| format!("{k}: SAM {v}, CDK {}", c.outputs[k]))
                .collect();
            assert!(differ.is_empty(), "{}: {differ:#?}", cdk.name());
        }
    }
}
