//! The plan shown in docs/plans.md is a valid plan for the CIFAR10-DVS VGG.

use memopt_checkpoint::{Plan, zoo};
use memopt_core::Device;

#[test]
fn the_documented_plan_applies_to_the_vgg() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/plans.md")).unwrap();
    let start = page.find("```json\n").expect("a json block") + "```json\n".len();
    let json = &page[start..start + page[start..].find("```").unwrap()];
    let plan = Plan::from_json(json).unwrap();
    assert_eq!(plan.entries.len(), 6);
    let spec = zoo::entry("cifar10dvs-vgg").unwrap().small;
    let mut model = zoo::build("cifar10dvs-vgg", &spec, Device::META, 0).unwrap();
    model.apply_plan(&plan).unwrap();
    assert_eq!(model.plan().entries.len(), 6);
}
