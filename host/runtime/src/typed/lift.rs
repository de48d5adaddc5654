//! How much host memory a function's result can take once wasmtime lifts it into `Val`s,
//! per byte of guest memory it occupies.
//!
//! The dynamic API lifts a whole result before Cordon sees it, and a value is much larger on
//! the host than in the guest: a `list<u8>` element is one guest byte and one `Val` (tens of
//! bytes) on the host; a `list<record { a: bool }>` element also gets a vector and a copy of
//! the field's name. So a plugin within its memory limit could make the host allocate tens of
//! times as much. Cordon bounds it: a call of a function whose result can amplify is held to a
//! guest memory limit small enough that the lifted result stays within
//! [`HOST_LIFT_BUDGET`]; a list of values that take no guest memory at all (which could
//! stand for billions of values) makes the function unavailable.

use std::mem::size_of;

use wasmtime::component::Val;
use wasmtime::component::types::Type;

/// The most host memory one call's lifted result may take.
pub(crate) const HOST_LIFT_BUDGET: u64 = 1 << 30;

const VAL: usize = size_of::<Val>();
const FIELD: usize = size_of::<(String, Val)>();
const STRING: usize = size_of::<String>();

/// The host bytes one value of `ty` takes beyond the `Val` that holds it (its boxes, vectors
/// and copied names), not counting list elements and string bytes, which are counted per
/// guest byte where they are.
fn heap(ty: &Type) -> usize {
    match ty {
        Type::Enum(e) => e.names().map(str::len).max().unwrap_or(0),
        Type::Record(r) => r.fields().map(|f| FIELD + f.name.len() + heap(&f.ty)).sum(),
        Type::Tuple(t) => t.types().map(|t| VAL + heap(&t)).sum(),
        Type::Variant(v) => v
            .cases()
            .map(|c| c.name.len() + c.ty.as_ref().map_or(0, |t| VAL + heap(t)))
            .max()
            .unwrap_or(0),
        Type::Option(o) => VAL + heap(&o.ty()),
        Type::Result(r) => {
            VAL + [r.ok(), r.err()]
                .iter()
                .flatten()
                .map(heap)
                .max()
                .unwrap_or(0)
        }
        Type::Flags(f) => f.names().map(|n| STRING + n.len()).sum(),
        _ => 0,
    }
}

/// A lower bound of the guest bytes one value of `ty` takes in a list (its canonical ABI
/// size without padding).
fn guest(ty: &Type) -> usize {
    match ty {
        Type::Bool | Type::S8 | Type::U8 => 1,
        Type::S16 | Type::U16 => 2,
        Type::S32 | Type::U32 | Type::Float32 | Type::Char => 4,
        Type::S64 | Type::U64 | Type::Float64 => 8,
        Type::String | Type::List(_) | Type::Map(_) => 8,
        Type::FixedLengthList(l) => l.len() as usize * guest(&l.ty()),
        Type::Record(r) => r.fields().map(|f| guest(&f.ty)).sum(),
        Type::Tuple(t) => t.types().map(|t| guest(&t)).sum(),
        Type::Variant(_) | Type::Enum(_) | Type::Option(_) | Type::Result(_) => 1,
        Type::Flags(f) => usize::from(f.names().next().is_some()),
        _ => 4,
    }
}

/// The most host bytes per guest byte a value of `ty` can take once lifted; `None` when a
/// list in it holds values that take no guest memory.
pub(crate) fn amplification(ty: &Type) -> Option<f64> {
    let list = |element: &Type| -> Option<f64> {
        let size = guest(element);
        if size == 0 {
            return None;
        }
        let here = (VAL + heap(element)) as f64 / size as f64;
        Some(here.max(amplification(element)?))
    };
    match ty {
        Type::List(l) => list(&l.ty()),
        Type::FixedLengthList(l) => list(&l.ty()),
        Type::Map(m) => {
            let (k, v) = (m.key(), m.value());
            let size = guest(&k) + guest(&v);
            if size == 0 {
                return None;
            }
            let here = (2 * VAL + heap(&k) + heap(&v)) as f64 / size as f64;
            Some(here.max(amplification(&k)?).max(amplification(&v)?))
        }
        Type::Record(r) => r
            .fields()
            .map(|f| amplification(&f.ty))
            .try_fold(1.0_f64, |m, a| Some(m.max(a?))),
        Type::Tuple(t) => t
            .types()
            .map(|t| amplification(&t))
            .try_fold(1.0_f64, |m, a| Some(m.max(a?))),
        Type::Variant(v) => v
            .cases()
            .filter_map(|c| c.ty)
            .map(|t| amplification(&t))
            .try_fold(1.0_f64, |m, a| Some(m.max(a?))),
        Type::Option(o) => amplification(&o.ty()),
        Type::Result(r) => [r.ok(), r.err()]
            .iter()
            .flatten()
            .map(amplification)
            .try_fold(1.0_f64, |m, a| Some(m.max(a?))),
        // A string's bytes are copied one for one.
        _ => Some(1.0),
    }
}

/// The guest memory limit that keeps a result amplifying `ratio`-fold within the budget, in
/// whole MiB (at least one).
pub(crate) fn memory_cap(ratio: f64) -> u64 {
    const MIB: u64 = 1 << 20;
    let cap = (HOST_LIFT_BUDGET as f64 / ratio.max(1.0)) as u64;
    (cap / MIB).max(1) * MIB
}
