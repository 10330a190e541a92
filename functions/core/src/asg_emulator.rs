//! The ASG emulator: Auto Scaling's answers over a list of groups, as AWS gives them
//! (a desired size outside the group's bounds refused; a decrement at the minimum
//! refused; a terminated instance `Terminating` until the group settles). The
//! simulator's ports and the tests' in-memory ports (`crate::testing`, behind
//! `test-util`) both answer with it, so a rule of Auto Scaling's is written once. Not
//! behind `test-util` itself: the simulator ships in the CLI.

use crate::config::PoolConfig;
use crate::observe::{AsgSize, LifecycleState, ObservedAsg};
use crate::ports::{ErrorKind, PortError};
use crate::snapshot;

fn not_found(operation: &str, what: String) -> PortError {
    PortError::new(ErrorKind::Permanent, operation, what)
}

/// The pool's groups: its spot ASGs in the pool's order, then its on-demand ASG.
pub fn describe_pool(
    asgs: &[ObservedAsg],
    pool: &PoolConfig,
) -> Result<(Vec<ObservedAsg>, Option<ObservedAsg>), PortError> {
    let (spot, on_demand) = snapshot::pool_asgs(asgs, pool, "DescribeAutoScalingGroups")?;
    Ok((spot.into_iter().cloned().collect(), on_demand.cloned()))
}

/// A group's size and bounds.
pub fn size(asgs: &[ObservedAsg], asg: &str) -> Result<AsgSize, PortError> {
    let found = asgs.iter().find(|a| a.name == asg);
    found.map(ObservedAsg::size).ok_or_else(|| not_found("DescribeAutoScalingGroups", format!("ASG {asg} not found")))
}

/// SetDesiredCapacity: refused outside the group's bounds, as AWS refuses it.
pub fn set_desired(asgs: &mut [ObservedAsg], asg: &str, desired: u32) -> Result<(), PortError> {
    let group = asgs
        .iter_mut()
        .find(|a| a.name == asg)
        .ok_or_else(|| not_found("SetDesiredCapacity", format!("ASG {asg} not found")))?;
    if desired < group.min || desired > group.max {
        return Err(PortError::new(
            ErrorKind::Permanent,
            "SetDesiredCapacity",
            format!("ValidationError: desired {desired} outside {asg}'s bounds {}..{}", group.min, group.max),
        ));
    }
    group.desired = desired;
    Ok(())
}

/// TerminateInstanceInAutoScalingGroup: the instance goes `Terminating`; with decrement
/// the group's desired size drops by one, refused at its minimum.
pub fn terminate(asgs: &mut [ObservedAsg], instance_id: &str, decrement: bool) -> Result<(), PortError> {
    let group = asgs.iter_mut().find(|a| a.instance(instance_id).is_some()).ok_or_else(|| {
        not_found("TerminateInstanceInAutoScalingGroup", format!("instance {instance_id} is in no ASG"))
    })?;
    if decrement {
        if group.desired <= group.min {
            return Err(PortError::new(
                ErrorKind::Permanent,
                "TerminateInstanceInAutoScalingGroup",
                format!("ValidationError: {} is at its minimum {}; cannot decrement", group.name, group.min),
            ));
        }
        group.desired -= 1;
    }
    if let Some(i) = group.instances.iter_mut().find(|i| i.id == instance_id) {
        i.lifecycle_state = LifecycleState::Terminating;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{AsgInstance, Market};

    fn group(desired: u32, min: u32, max: u32) -> ObservedAsg {
        let instance = AsgInstance {
            id: "i-1".into(),
            lifecycle_state: LifecycleState::InService,
            availability_zone: String::new(),
            instance_type: String::new(),
            market: Market::Spot,
        };
        let instances = vec![instance];
        ObservedAsg { name: "s".into(), tags: Default::default(), desired, min, max, instances, activities: Vec::new() }
    }

    #[test]
    fn sizes_outside_the_bounds_and_decrements_at_the_minimum_are_refused() {
        let mut asgs = vec![group(2, 1, 3)];
        assert!(set_desired(&mut asgs, "s", 4).unwrap_err().message.contains("outside s's bounds 1..3"));
        assert!(set_desired(&mut asgs, "s", 0).is_err());
        set_desired(&mut asgs, "s", 1).unwrap();
        let at_min = terminate(&mut asgs, "i-1", true).unwrap_err();
        assert!(at_min.message.contains("at its minimum 1"), "{at_min}");
        assert_eq!(asgs[0].instances[0].lifecycle_state, LifecycleState::InService, "a refused call changes nothing");
        terminate(&mut asgs, "i-1", false).unwrap();
        assert_eq!((asgs[0].desired, asgs[0].instances[0].lifecycle_state), (1, LifecycleState::Terminating));
        assert!(terminate(&mut asgs, "i-2", false).is_err());
        assert!(size(&asgs, "nope").is_err());
    }
}
