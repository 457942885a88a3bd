//! The inputs' columns, compared before any work.
//!
//! Each file's schema is read as DataFusion's scan will read it (Parquet: from the footer;
//! CSV: from the header row, types inferred from the rows). Then:
//!
//! - by default every file must have the first file's columns: the same names, in the same
//!   order, of the same types (nullability aside). Any other file is refused, naming it and
//!   each column that differs;
//! - with `union_by_name` (DuckDB's `union_by_name`), columns are matched by name: the
//!   output has every column any file has, in order of first appearance; a file without a
//!   column reads it as nulls; a column whose types differ gets the narrowest type that
//!   holds every file's values exactly ([`widen`]), or the job is refused.
//!
//! No column is ever dropped, renamed or read by position from a file where it has another
//! name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::error::PipelineError;

/// Files of differing schemas listed in one error at most.
const LISTED_FILES: usize = 8;

/// The one schema of `files` (each with its own schema, in input order), or why not.
pub(super) fn common_schema(
    files: &[(PathBuf, SchemaRef)],
    union_by_name: bool,
) -> Result<SchemaRef, PipelineError> {
    let Some((first_path, first)) = files.first() else {
        return Err(PipelineError::NoInputFiles(String::new()));
    };
    if union_by_name {
        return merged_by_name(files);
    }
    let mut differing = Vec::new();
    let mut count = 0;
    for (path, schema) in &files[1..] {
        let differences = differences(first, schema);
        if !differences.is_empty() {
            count += 1;
            if differing.len() < LISTED_FILES {
                differing.push(format!("'{}': {}", path.display(), differences.join("; ")));
            }
        }
    }
    if count > 0 {
        if count > differing.len() {
            differing.push(format!("and {} more files", count - differing.len()));
        }
        return Err(PipelineError::SchemaMismatch {
            first: first_path.clone(),
            columns: column_list(first),
            differing: differing.join("\n  "),
        });
    }
    // Nullable wherever any file's column is.
    let fields: Vec<Field> = first
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let nullable = files
                .iter()
                .any(|(_, schema)| schema.field(i).is_nullable());
            field.as_ref().clone().with_nullable(nullable)
        })
        .collect();
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        first.metadata().clone(),
    )))
}

/// What differs in `other` from `first`, one phrase per column.
fn differences(first: &Schema, other: &Schema) -> Vec<String> {
    let mut found = Vec::new();
    for field in first.fields() {
        match other.field_with_name(field.name()) {
            Err(_) => found.push(format!("no column '{}'", field.name())),
            Ok(theirs) if theirs.data_type() != field.data_type() => found.push(format!(
                "column '{}' is {} (the first file's is {})",
                field.name(),
                theirs.data_type(),
                field.data_type()
            )),
            Ok(_) => {}
        }
    }
    for field in other.fields() {
        if first.field_with_name(field.name()).is_err() {
            found.push(format!(
                "column '{}' ({}) that the first file does not have",
                field.name(),
                field.data_type()
            ));
        }
    }
    if found.is_empty() {
        let names =
            |s: &Schema| -> Vec<String> { s.fields().iter().map(|f| f.name().clone()).collect() };
        if names(first) != names(other) {
            found.push(format!(
                "its columns are in another order ({})",
                column_list(other)
            ));
        }
    }
    found
}

fn column_list(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every column of every file, by name, in order of first appearance.
fn merged_by_name(files: &[(PathBuf, SchemaRef)]) -> Result<SchemaRef, PipelineError> {
    // (field, the file that first had it)
    let mut merged: Vec<(Field, &Path)> = Vec::new();
    for (path, schema) in files {
        for field in schema.fields() {
            match merged.iter_mut().find(|(f, _)| f.name() == field.name()) {
                None => merged.push((field.as_ref().clone(), path)),
                Some((known, from)) => {
                    let Some(wider) = widen(known.data_type(), field.data_type()) else {
                        return Err(PipelineError::IncompatibleColumn {
                            column: field.name().clone(),
                            first: from.to_path_buf(),
                            first_type: known.data_type().clone(),
                            path: path.clone(),
                            data_type: field.data_type().clone(),
                        });
                    };
                    let nullable = known.is_nullable() || field.is_nullable();
                    *known = known.clone().with_data_type(wider).with_nullable(nullable);
                }
            }
        }
    }
    let fields: Vec<Field> = merged
        .into_iter()
        .map(|(field, _)| {
            let everywhere = files
                .iter()
                .all(|(_, schema)| schema.field_with_name(field.name()).is_ok());
            let nullable = field.is_nullable() || !everywhere;
            field.with_nullable(nullable)
        })
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

/// The narrowest type that holds every value of `a` and of `b` exactly, if any: wider
/// integers of the same sign, signed integers over unsigned ones of half the width, floats
/// over narrower floats and over integers their mantissa holds, decimals with the larger
/// scale and integer digits (up to 38 digits), `Date64` over `Date32`, large or view
/// strings and binaries over plain ones, and anything over a column of nulls.
pub fn widen(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    if a == b {
        return Some(a.clone());
    }
    if *a == Null {
        return Some(b.clone());
    }
    if *b == Null {
        return Some(a.clone());
    }
    // Exact integer ranges: (signed, bits).
    let int = |t: &DataType| match t {
        Int8 => Some((true, 8)),
        Int16 => Some((true, 16)),
        Int32 => Some((true, 32)),
        Int64 => Some((true, 64)),
        UInt8 => Some((false, 8)),
        UInt16 => Some((false, 16)),
        UInt32 => Some((false, 32)),
        UInt64 => Some((false, 64)),
        _ => None,
    };
    let signed_of = |bits: u32| match bits {
        8 => Some(Int8),
        16 => Some(Int16),
        32 => Some(Int32),
        64 => Some(Int64),
        _ => None,
    };
    let unsigned_of = |bits: u32| match bits {
        8 => Some(UInt8),
        16 => Some(UInt16),
        32 => Some(UInt32),
        64 => Some(UInt64),
        _ => None,
    };
    // Mantissa bits of a float type (its exact integer range).
    let float = |t: &DataType| match t {
        Float16 => Some(11),
        Float32 => Some(24),
        Float64 => Some(53),
        _ => None,
    };
    let float_of = |mantissa: u32| match mantissa {
        11 => Some(Float16),
        24 => Some(Float32),
        _ => Some(Float64),
    };
    if let (Some((sa, ba)), Some((sb, bb))) = (int(a), int(b)) {
        return match (sa, sb) {
            (true, true) => signed_of(ba.max(bb)),
            (false, false) => unsigned_of(ba.max(bb)),
            // A signed type twice the unsigned one's width holds both.
            (true, false) => signed_of(ba.max(bb * 2)),
            (false, true) => signed_of(bb.max(ba * 2)),
        };
    }
    if let (Some(ma), Some(mb)) = (float(a), float(b)) {
        return float_of(ma.max(mb));
    }
    for (f, i) in [(a, b), (b, a)] {
        if let (Some(mantissa), Some((signed, bits))) = (float(f), int(i)) {
            // The integer's magnitude bits must fit the mantissa.
            let magnitude = if signed { bits - 1 } else { bits };
            let need = [11, 24, 53].into_iter().find(|m| *m >= magnitude)?;
            return float_of(need.max(mantissa));
        }
    }
    match (a, b) {
        (Decimal128(pa, sa), Decimal128(pb, sb)) => {
            let scale = (*sa).max(*sb);
            let digits = (*pa as i16 - *sa as i16).max(*pb as i16 - *sb as i16);
            let precision = digits + scale as i16;
            (precision <= 38).then_some(Decimal128(precision as u8, scale))
        }
        (Date32, Date64) | (Date64, Date32) => Some(Date64),
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => {
            Some(if matches!(a, LargeUtf8) || matches!(b, LargeUtf8) {
                LargeUtf8
            } else {
                Utf8View
            })
        }
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => {
            Some(if matches!(a, LargeBinary) || matches!(b, LargeBinary) {
                LargeBinary
            } else {
                BinaryView
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DataType::*;

    fn schema(columns: &[(&str, DataType)]) -> SchemaRef {
        Arc::new(Schema::new(
            columns
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone(), false))
                .collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn widening_is_exact_or_refused() {
        assert_eq!(widen(&Int32, &Int64), Some(Int64));
        assert_eq!(widen(&UInt32, &Int32), Some(Int64));
        assert_eq!(widen(&UInt64, &Int64), None);
        assert_eq!(widen(&UInt8, &UInt32), Some(UInt32));
        assert_eq!(widen(&Int32, &Float32), Some(Float64));
        assert_eq!(widen(&Int16, &Float32), Some(Float32));
        assert_eq!(widen(&Int64, &Float64), None);
        assert_eq!(widen(&Float32, &Float64), Some(Float64));
        assert_eq!(
            widen(&Decimal128(10, 2), &Decimal128(12, 4)),
            Some(Decimal128(12, 4))
        );
        assert_eq!(
            widen(&Decimal128(10, 0), &Decimal128(6, 4)),
            Some(Decimal128(14, 4))
        );
        assert_eq!(widen(&Decimal128(38, 0), &Decimal128(38, 2)), None);
        assert_eq!(widen(&Date32, &Date64), Some(Date64));
        assert_eq!(widen(&Utf8, &Utf8View), Some(Utf8View));
        assert_eq!(widen(&Utf8, &LargeUtf8), Some(LargeUtf8));
        assert_eq!(widen(&Null, &Int8), Some(Int8));
        assert_eq!(widen(&Int64, &Utf8), None);
        assert_eq!(
            widen(
                &Timestamp(datafusion::arrow::datatypes::TimeUnit::Second, None),
                &Timestamp(datafusion::arrow::datatypes::TimeUnit::Nanosecond, None)
            ),
            None,
            "seconds far from 1970 do not fit nanoseconds"
        );
    }

    #[test]
    fn differing_files_are_named_with_their_columns() {
        let a = schema(&[("k", Int64), ("x", Int32)]);
        let b = schema(&[("k", Int64), ("x", Int32), ("y", Utf8)]);
        let c = schema(&[("k", Int64), ("x", Utf8)]);
        let d = schema(&[("x", Int32), ("k", Int64)]);
        let files = vec![
            (PathBuf::from("a.parquet"), a.clone()),
            (PathBuf::from("b.parquet"), b),
            (PathBuf::from("c.parquet"), c),
            (PathBuf::from("d.parquet"), d),
        ];
        let err = common_schema(&files, false).unwrap_err().to_string();
        for part in [
            "'a.parquet'",
            "'b.parquet': column 'y' (Utf8) that the first file does not have",
            "'c.parquet': column 'x' is Utf8 (the first file's is Int32)",
            "'d.parquet': its columns are in another order (x Int32, k Int64)",
            "--union-by-name",
        ] {
            assert!(err.contains(part), "{part} not in {err}");
        }
        let same = vec![
            (PathBuf::from("a.parquet"), a.clone()),
            (PathBuf::from("e.parquet"), a.clone()),
        ];
        assert_eq!(common_schema(&same, false).unwrap().fields(), a.fields());
    }

    #[test]
    fn union_by_name_keeps_every_column_in_order_of_first_appearance() {
        let files = vec![
            (
                PathBuf::from("a.parquet"),
                schema(&[("k", Int32), ("x", Int32)]),
            ),
            (
                PathBuf::from("b.parquet"),
                schema(&[("y", Utf8), ("k", Int64)]),
            ),
        ];
        let merged = common_schema(&files, true).unwrap();
        let got: Vec<(String, DataType, bool)> = merged
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("k".into(), Int64, false),
                ("x".into(), Int32, true),
                ("y".into(), Utf8, true),
            ]
        );
        let clash = vec![
            (PathBuf::from("a.parquet"), schema(&[("k", Int64)])),
            (PathBuf::from("b.parquet"), schema(&[("k", Utf8)])),
        ];
        let err = common_schema(&clash, true).unwrap_err().to_string();
        assert!(
            err.contains("column 'k' is Int64 in 'a.parquet' but Utf8 in 'b.parquet'"),
            "{err}"
        );
    }
}
