//! Random and mutated model descriptions and plans thrown at the parsers (issue 16): every input
//! ends in a value or a clean error with a message, never a panic. What parses is taken
//! further: a model is built on Meta for its own input, a plan is applied to a model.

use memopt_checkpoint::zoo::custom::CustomModel;
use memopt_checkpoint::{InputSpec, Plan, zoo};
use memopt_core::{Device, MemoryTracker};
use proptest::prelude::*;

const MODEL: &str = include_str!("../../../examples/models/small-snn.json");
const PLAN: &str = r#"{"version": 1, "entries": [
  {"path": "0", "policy": {"kind": "checkpoint", "compressor": "bit_spike", "chunks": 1}},
  {"path": "", "children": [1, 3], "policy": {"kind": "checkpoint"}},
  {"path": "2", "policy": {"kind": "store"}}
]}"#;

/// Keys the parsers know, so that random objects reach deep into them, and a few they do not.
const KEYS: &[&str] = &[
    "name",
    "input",
    "time_steps",
    "sample",
    "classes",
    "layers",
    "type",
    "out",
    "kernel",
    "stride",
    "padding",
    "bias",
    "tau",
    "body",
    "shortcut",
    "after",
    "p",
    "v_reset",
    "surrogate",
    "alpha",
    "version",
    "entries",
    "path",
    "children",
    "policy",
    "kind",
    "compressor",
    "chunks",
    "x",
    "",
];
const WORDS: &[&str] = &[
    "conv2d",
    "linear",
    "lif",
    "if",
    "plif",
    "flatten",
    "residual",
    "max_pool",
    "avg_pool",
    "adaptive_avg_pool",
    "batch_norm",
    "dropout",
    "relu",
    "checkpoint",
    "store",
    "bit_spike",
    "atan",
    "sigmoid",
    "0",
    "1.2",
    "",
    "\u{1b}[2J",
    "\u{feff}",
];

fn number() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        (0u64..20).prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        Just(serde_json::json!(4294967296u64)),
        Just(serde_json::json!(1e300)),
        Just(serde_json::json!(-0.5)),
        Just(serde_json::json!(0.999999)),
    ]
}

/// A value to put in place of another: mostly small numbers and known words (which keep a
/// description close to valid), sometimes anything.
fn replacement() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        4 => (0u64..40).prop_map(serde_json::Value::from),
        2 => proptest::sample::select(WORDS).prop_map(serde_json::Value::from),
        1 => number(),
        1 => json_value(),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        number(),
        proptest::sample::select(WORDS).prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// One edit of a text: delete, insert, duplicate or replace a span (on char boundaries).
#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, String),
    Duplicate(usize, usize),
    Replace(usize, usize, String),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let piece = prop_oneof![
        proptest::sample::select(
            &[
                "{",
                "}",
                "[",
                "]",
                ",",
                ":",
                "\"",
                "-",
                "0",
                "99999999999999999999",
                "4294967296",
                "null",
                "true",
                "\"type\": \"lif\", ",
                "\"out\": 0, ",
                "\\u0000",
                "\u{1b}",
                "1e309",
                "\"\": 1, ",
            ][..]
        )
        .prop_map(str::to_string),
        "[ -~]{0,8}",
    ];
    let edit = prop_oneof![
        (any::<usize>(), 0usize..16).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), piece.clone()).prop_map(|(a, s)| Edit::Insert(a, s)),
        (any::<usize>(), 0usize..40).prop_map(|(a, n)| Edit::Duplicate(a, n)),
        (any::<usize>(), 0usize..8, piece).prop_map(|(a, n, s)| Edit::Replace(a, n, s)),
    ];
    proptest::collection::vec(edit, 1..6)
}

fn boundary(s: &str, at: usize) -> usize {
    let mut i = at % (s.len() + 1);
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut s = text.to_string();
    for e in edits {
        match e {
            Edit::Delete(a, n) | Edit::Replace(a, n, _) | Edit::Duplicate(a, n) => {
                let start = boundary(&s, *a);
                let end = boundary(&s, start + n);
                let end = end.max(start);
                match e {
                    Edit::Delete(..) => s.replace_range(start..end, ""),
                    Edit::Replace(_, _, r) => s.replace_range(start..end, r),
                    _ => {
                        let copy = s[start..end].to_string();
                        s.insert_str(end, &copy);
                    }
                }
            }
            Edit::Insert(a, t) => {
                let at = boundary(&s, *a);
                s.insert_str(at, t);
            }
        }
    }
    s
}

/// JSON pointers of every value inside `v` (the root included).
fn pointers(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        serde_json::Value::Object(map) => {
            for (k, item) in map {
                pointers(
                    item,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        _ => {}
    }
    out.push(at);
}

/// `text` (valid JSON) with `changes` of its values replaced: always valid JSON, so the
/// semantic checks (sizes, shapes, policies) and the builder are what is exercised.
fn replace_values(text: &str, changes: &[(usize, serde_json::Value)]) -> String {
    let mut v: serde_json::Value = serde_json::from_str(text).expect("seed parses");
    for (pick, new) in changes {
        let mut all = Vec::new();
        pointers(&v, String::new(), &mut all);
        let at = &all[pick % all.len()];
        if let Some(slot) = v.pointer_mut(at) {
            *slot = new.clone();
        }
    }
    v.to_string()
}

/// Parses as a model and as a plan; what parses is built or applied on Meta. Panics only on a
/// bug (which proptest then reports with the input).
fn exercise(text: &str) {
    let _scratch = MemoryTracker::install(MemoryTracker::new(Device::META));
    match CustomModel::from_json(text) {
        Ok(model) => {
            if let Err(e) = model.build(model.spec(), Device::META, 0) {
                assert!(!e.to_string().is_empty());
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    match Plan::from_json(text) {
        Ok(plan) => {
            let spec = InputSpec {
                time_steps: 2,
                sample: vec![16],
                classes: 10,
            };
            let mut model = zoo::build("spiking-mlp", &spec, Device::META, 0).expect("the zoo model builds");
            if let Err(e) = model.apply_plan(&plan) {
                assert!(!e.to_string().is_empty());
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

#[test]
fn the_seeds_parse() {
    CustomModel::from_json(MODEL).expect("the example model parses");
    Plan::from_json(PLAN).expect("the seed plan parses");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_json_values_end_in_a_value_or_a_clean_error(v in json_value()) {
        exercise(&v.to_string());
    }

    #[test]
    fn mutated_models_end_in_a_value_or_a_clean_error(e in edits()) {
        exercise(&apply(MODEL, &e));
    }

    #[test]
    fn mutated_plans_end_in_a_value_or_a_clean_error(e in edits()) {
        exercise(&apply(PLAN, &e));
    }

    #[test]
    fn models_with_replaced_values_end_in_a_value_or_a_clean_error(
        changes in proptest::collection::vec((any::<usize>(), replacement()), 1..3)
    ) {
        exercise(&replace_values(MODEL, &changes));
    }

    #[test]
    fn plans_with_replaced_values_end_in_a_value_or_a_clean_error(
        changes in proptest::collection::vec((any::<usize>(), replacement()), 1..3)
    ) {
        exercise(&replace_values(PLAN, &changes));
    }

    #[test]
    fn random_bytes_end_in_a_clean_error(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        exercise(&String::from_utf8_lossy(&bytes));
    }
}
