//! Comparing schemas of files and batches that must line up, naming the
//! first difference when they do not.

use arrow_schema::{Field, Schema, SchemaRef};
use std::sync::Arc;

fn describe(field: &Field) -> String {
    format!("`{}: {}`", field.name(), field.data_type())
}

/// `first` widened by `other`: the same column names and types in the same
/// order are required; a column nullable in either is nullable. `Err` names
/// the first difference. Metadata is `first`'s.
pub(crate) fn merge_schemas(first: &SchemaRef, other: &Schema) -> Result<SchemaRef, String> {
    let (a, b) = (first.fields(), other.fields());
    for (i, (fa, fb)) in a.iter().zip(b.iter()).enumerate() {
        if fa.name() != fb.name() || fa.data_type() != fb.data_type() {
            return Err(format!("column {i} is {} in the first but {} in the other", describe(fa), describe(fb)));
        }
    }
    if a.len() != b.len() {
        let (more, which) =
            if a.len() > b.len() { (&a[b.len()], "only the first") } else { (&b[a.len()], "only the other") };
        return Err(format!(
            "{which} has column {} {} ({} columns against {})",
            a.len().min(b.len()),
            describe(more),
            a.len(),
            b.len()
        ));
    }
    if a.iter().zip(b.iter()).all(|(fa, fb)| fa.is_nullable() || !fb.is_nullable()) {
        return Ok(first.clone());
    }
    let fields: Vec<Field> = a
        .iter()
        .zip(b.iter())
        .map(|(fa, fb)| fa.as_ref().clone().with_nullable(fa.is_nullable() || fb.is_nullable()))
        .collect();
    Ok(Arc::new(Schema::new_with_metadata(fields, first.metadata().clone())))
}
