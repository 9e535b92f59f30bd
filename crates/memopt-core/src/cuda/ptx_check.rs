//! Checking a kernel signature table against the PTX NVRTC made of its source, so that a
//! launch (typed by the table) can pass neither the wrong number nor the wrong kind of
//! arguments. Used by the NVRTC tests of every crate that has CUDA kernels; needs no GPU.

use super::{KernelTable, Signature};
use crate::{CoreError, Result};

/// Each `.entry` of `ptx` as `(kernel name, text up to the next .entry)`, in PTX order.
pub fn ptx_entries(ptx: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + 7..];
        let name_end = after.find('(').unwrap_or(after.len());
        let next = after.find(".entry ").unwrap_or(after.len());
        out.push((after[..name_end].trim(), &after[..next]));
        rest = &after[next..];
    }
    out
}

/// The parameter types of an `.entry` header (`(.param .u64 k_param_0, .param .align 8 .b8
/// k_param_1[88])`), without their names, as [`super::ArgKind::ptx_type`] writes them:
/// `.u64`, `.align 8 .b8 [88]`. `None` when a `.param` has no type.
pub fn ptx_entry_params(entry: &str) -> Option<Vec<String>> {
    let open = entry.find('(').map_or(entry.len(), |i| i + 1);
    let close = entry[open..].find(')').map_or(entry.len(), |i| open + i);
    entry[open..close]
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let words: Vec<&str> = p.split_whitespace().skip(1).collect();
            let (name, types) = words.split_last()?;
            if types.is_empty() {
                return None;
            }
            let size = name.find('[').map_or("", |i| &name[i..]);
            let types = types.join(" ");
            Some(if size.is_empty() {
                types
            } else {
                format!("{types} {size}")
            })
        })
        .collect()
}

/// Checks `table` against `ptx`, the PTX compiled from `table.source`: every kernel the source
/// declares has exactly one signature, and each signature's argument kinds are the `.param`
/// list of that kernel's `.entry`. The error ([`CoreError::InvalidArgument`], op
/// `"kernel signatures"`) names the source, the kernel, the table's parameters and the PTX's.
pub fn check_signatures_against_ptx(table: &KernelTable, ptx: &str) -> Result<()> {
    const OP: &str = "kernel signatures";
    let src = table.source;
    let mut with_signature: Vec<&str> = table.signatures.iter().map(|s| s.kernel).collect();
    let mut declared = src.kernels.to_vec();
    with_signature.sort_unstable();
    declared.sort_unstable();
    if with_signature != declared {
        return Err(CoreError::invalid(
            OP,
            format!(
                "{}: the table has signatures for {with_signature:?}, the source declares {declared:?}",
                src.name
            ),
        ));
    }
    let entries = ptx_entries(ptx);
    for Signature { kernel, params } in table.signatures {
        let Some((_, body)) = entries.iter().find(|(name, _)| name == kernel) else {
            return Err(CoreError::invalid(
                OP,
                format!("{}: the PTX has no .entry {kernel}", src.name),
            ));
        };
        let want: Vec<String> = params.iter().map(|p| p.1.ptx_type()).collect();
        let got = ptx_entry_params(body).ok_or_else(|| {
            CoreError::invalid(
                OP,
                format!("{}: the .entry {kernel} has a .param without a type", src.name),
            )
        })?;
        if want != got {
            return Err(CoreError::invalid(
                OP,
                format!(
                    "{}: the table launches {kernel} with {params:?} ({want:?}), the PTX takes {got:?}",
                    src.name
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{ArgKind, KernelSource};

    static SRC: KernelSource = KernelSource {
        name: "t.cu",
        source: "",
        kernels: &["k"],
    };
    const PTX: &str =
        ".visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .f32 k_param_1\n)\n{\n ret;\n}\n";

    fn table(params: &'static [(&'static str, ArgKind)]) -> KernelTable {
        KernelTable {
            source: &SRC,
            signatures: Box::leak(Box::new([Signature { kernel: "k", params }])),
        }
    }

    #[test]
    fn a_matching_table_passes_and_a_wrong_kind_count_or_kernel_fails() {
        let ok = table(&[("x", ArgKind::Ptr), ("s", ArgKind::F32)]);
        check_signatures_against_ptx(&ok, PTX).unwrap();
        let kind = table(&[("x", ArgKind::Ptr), ("s", ArgKind::F64)]);
        let e = check_signatures_against_ptx(&kind, PTX).unwrap_err().to_string();
        assert!(e.contains("t.cu") && e.contains("k") && e.contains(".f64"), "{e}");
        let count = table(&[("x", ArgKind::Ptr)]);
        assert!(check_signatures_against_ptx(&count, PTX).is_err());
        let e = check_signatures_against_ptx(&ok, ".entry other(\n)\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no .entry k"), "{e}");
    }
}
