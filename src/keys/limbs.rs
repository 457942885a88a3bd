//! Arrow key columns → order-preserving unsigned 64-bit limbs.
//!
//! Every supported type maps each value to one or more `u64` limbs such that comparing the
//! limbs lexicographically as unsigned integers gives arrow's order of the values:
//!
//! | type | limbs |
//! | --- | --- |
//! | signed integers, dates, times, timestamps, durations, Decimal32/64 | `v as i64 as u64 ^ 1<<63` |
//! | unsigned integers | `v as u64` |
//! | Float16/32/64 | IEEE total order: negative → `!bits`, else `bits | sign` |
//! | Decimal128 | the 128-bit sign-flipped value, high limb first |
//! | Decimal256 | the 256-bit sign-flipped value, four limbs, highest first |
//! | Boolean | `0` / `1` |
//! | IntervalYearMonth | months as a signed integer |
//! | IntervalDayTime | days, milliseconds (two signed limbs, as arrow compares them) |
//! | IntervalMonthDayNano | months, days, nanoseconds (three signed limbs) |
//! | Null | no limbs (every row is null) |
//!
//! Byte-like values (strings, binaries) encode as a prefix window (`bytes`), dictionaries as
//! the rank of their value (`dictionary`).
//!
//! Values under null slots are whatever the buffer holds; callers mask them with validity.

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray};
use arrow::datatypes::*;
use datafusion::arrow;
use datafusion::common::{internal_err, Result};

/// Sign flip: two's complement `i64` → unsigned with the same order.
#[inline]
fn signed(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

/// IEEE 754 total order for a float's bits of `BITS` width, as an unsigned integer.
#[inline]
fn float_total_order<const BITS: u32>(bits: u64) -> u64 {
    let sign = 1u64 << (BITS - 1);
    let mask = if BITS == 64 {
        u64::MAX
    } else {
        (1u64 << BITS) - 1
    };
    if bits & sign != 0 {
        !bits & mask
    } else {
        bits | sign
    }
}

/// Why `data_type` cannot be a sort key, or `None` when it can.
pub fn unsupported_reason(data_type: &DataType) -> Option<String> {
    use DataType::*;
    match data_type {
        Null
        | Boolean
        | Int8
        | Int16
        | Int32
        | Int64
        | UInt8
        | UInt16
        | UInt32
        | UInt64
        | Float16
        | Float32
        | Float64
        | Decimal32(_, _)
        | Decimal64(_, _)
        | Decimal128(_, _)
        | Decimal256(_, _)
        | Date32
        | Date64
        | Time32(_)
        | Time64(_)
        | Timestamp(_, _)
        | Duration(_)
        | Interval(_) => None,
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => {
            None
        }
        Dictionary(_, value_type) => {
            let value_reason = unsupported_reason(value_type);
            if super::dictionary::is_rankable(value_type, value_reason.is_none()) {
                None
            } else {
                Some(format!(
                    "sort key type {data_type}: dictionary values of type {value_type} cannot be ranked"
                ))
            }
        }
        other => Some(format!(
            "sort key type {other} is not supported by gpusort (nested and union types keep DataFusion's sort)"
        )),
    }
}

/// Number of limbs a value of `data_type` encodes to.
pub(super) fn limb_count(data_type: &DataType) -> usize {
    match data_type {
        DataType::Null => 0,
        DataType::Decimal128(_, _) => 2,
        DataType::Decimal256(_, _) => 4,
        DataType::Interval(IntervalUnit::DayTime) => 2,
        DataType::Interval(IntervalUnit::MonthDayNano) => 3,
        _ => 1,
    }
}

/// How a limb is read from a value's bytes (`kernels/encode.cu` mirrors this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum LimbKind {
    /// Unsigned little-endian integer.
    Unsigned = 0,
    /// Two's complement little-endian integer: sign-extended, then the sign flip.
    Signed = 1,
    /// IEEE float of `8 * width` bits: the total-order transform.
    Float = 2,
    /// One bit of a bitmap (Boolean values), `0` or `1`.
    Bit = 3,
}

/// Where one limb of a fixed-width value lives in the column's values buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimbSource {
    /// Bytes per value (0 for a bitmap).
    pub stride: u32,
    /// Byte offset of the limb within the value.
    pub offset: u32,
    /// Bytes of the limb: 1, 2, 4 or 8 (0 for a bitmap).
    pub width: u32,
    /// How the bytes become an order-preserving limb.
    pub kind: LimbKind,
}

/// The limbs of `data_type` as reads from its raw values buffer, in `append_limbs`'s
/// order; `None` for a type without a fixed-width layout.
pub fn limb_sources(data_type: &DataType) -> Option<Vec<LimbSource>> {
    use DataType::*;
    use LimbKind::*;
    let one = |width: u32, kind| {
        vec![LimbSource {
            stride: width,
            offset: 0,
            width,
            kind,
        }]
    };
    let parts = |stride: u32, parts: &[(u32, u32, LimbKind)]| {
        parts
            .iter()
            .map(|&(offset, width, kind)| LimbSource {
                stride,
                offset,
                width,
                kind,
            })
            .collect()
    };
    Some(match data_type {
        Null => Vec::new(),
        Boolean => vec![LimbSource {
            stride: 0,
            offset: 0,
            width: 0,
            kind: Bit,
        }],
        Int8 => one(1, Signed),
        Int16 => one(2, Signed),
        Int32 | Date32 | Time32(_) | Decimal32(_, _) | Interval(IntervalUnit::YearMonth) => {
            one(4, Signed)
        }
        Int64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) | Decimal64(_, _) => {
            one(8, Signed)
        }
        UInt8 => one(1, Unsigned),
        UInt16 => one(2, Unsigned),
        UInt32 => one(4, Unsigned),
        UInt64 => one(8, Unsigned),
        Float16 => one(2, Float),
        Float32 => one(4, Float),
        Float64 => one(8, Float),
        Decimal128(_, _) => parts(16, &[(8, 8, Signed), (0, 8, Unsigned)]),
        Decimal256(_, _) => parts(
            32,
            &[
                (24, 8, Signed),
                (16, 8, Unsigned),
                (8, 8, Unsigned),
                (0, 8, Unsigned),
            ],
        ),
        Interval(IntervalUnit::DayTime) => parts(8, &[(0, 4, Signed), (4, 4, Signed)]),
        Interval(IntervalUnit::MonthDayNano) => {
            parts(16, &[(0, 4, Signed), (4, 4, Signed), (8, 8, Signed)])
        }
        _ => return None,
    })
}

/// The limb of row `row` read as `source` says from a values buffer: the host twin of
/// `read_limb` in `kernels/encode.cu` (tests hold both to `append_limbs`).
pub fn limb_from_bytes(values: &[u8], row: usize, source: LimbSource) -> u64 {
    if source.kind == LimbKind::Bit {
        return ((values[row / 8] >> (row % 8)) & 1) as u64;
    }
    let at = row * source.stride as usize + source.offset as usize;
    let width = source.width as usize;
    let mut le = [0u8; 8];
    le[..width].copy_from_slice(&values[at..at + width]);
    let raw = u64::from_le_bytes(le);
    let bits = 8 * source.width;
    match source.kind {
        LimbKind::Unsigned | LimbKind::Bit => raw,
        LimbKind::Signed => signed(((raw << (64 - bits)) as i64) >> (64 - bits)),
        LimbKind::Float => match bits {
            16 => float_total_order::<16>(raw),
            32 => float_total_order::<32>(raw),
            _ => float_total_order::<64>(raw),
        },
    }
}

/// Appends the limbs of `array` (all rows, nulls included) to `limbs`, one `Vec` per limb.
pub(super) fn append_limbs(array: &ArrayRef, limbs: &mut [Vec<u64>]) -> Result<()> {
    use DataType::*;
    match array.data_type() {
        Null => {}
        Boolean => append_bool(array.as_boolean(), &mut limbs[0]),
        Int8 => append_map::<Int8Type>(array, &mut limbs[0], |v| signed(v as i64)),
        Int16 => append_map::<Int16Type>(array, &mut limbs[0], |v| signed(v as i64)),
        Int32 => append_map::<Int32Type>(array, &mut limbs[0], |v| signed(v as i64)),
        Int64 => append_map::<Int64Type>(array, &mut limbs[0], signed),
        UInt8 => append_map::<UInt8Type>(array, &mut limbs[0], |v| v as u64),
        UInt16 => append_map::<UInt16Type>(array, &mut limbs[0], |v| v as u64),
        UInt32 => append_map::<UInt32Type>(array, &mut limbs[0], |v| v as u64),
        UInt64 => append_map::<UInt64Type>(array, &mut limbs[0], |v| v),
        Float16 => append_map::<Float16Type>(array, &mut limbs[0], |v| {
            float_total_order::<16>(v.to_bits() as u64)
        }),
        Float32 => append_map::<Float32Type>(array, &mut limbs[0], |v| {
            float_total_order::<32>(v.to_bits() as u64)
        }),
        Float64 => append_map::<Float64Type>(array, &mut limbs[0], |v| {
            float_total_order::<64>(v.to_bits())
        }),
        Decimal32(_, _) => append_map::<Decimal32Type>(array, &mut limbs[0], |v| signed(v as i64)),
        Decimal64(_, _) => append_map::<Decimal64Type>(array, &mut limbs[0], signed),
        Decimal128(_, _) => append_decimal128(array.as_primitive::<Decimal128Type>(), limbs),
        Decimal256(_, _) => append_decimal256(array.as_primitive::<Decimal256Type>(), limbs),
        Date32 => append_map::<Date32Type>(array, &mut limbs[0], |v| signed(v as i64)),
        Date64 => append_map::<Date64Type>(array, &mut limbs[0], signed),
        Time32(TimeUnit::Second) => append_i32::<Time32SecondType>(array, limbs),
        Time32(TimeUnit::Millisecond) => append_i32::<Time32MillisecondType>(array, limbs),
        Time64(TimeUnit::Microsecond) => append_i64::<Time64MicrosecondType>(array, limbs),
        Time64(TimeUnit::Nanosecond) => append_i64::<Time64NanosecondType>(array, limbs),
        Timestamp(TimeUnit::Second, _) => append_i64::<TimestampSecondType>(array, limbs),
        Timestamp(TimeUnit::Millisecond, _) => append_i64::<TimestampMillisecondType>(array, limbs),
        Timestamp(TimeUnit::Microsecond, _) => append_i64::<TimestampMicrosecondType>(array, limbs),
        Timestamp(TimeUnit::Nanosecond, _) => append_i64::<TimestampNanosecondType>(array, limbs),
        Duration(TimeUnit::Second) => append_i64::<DurationSecondType>(array, limbs),
        Duration(TimeUnit::Millisecond) => append_i64::<DurationMillisecondType>(array, limbs),
        Duration(TimeUnit::Microsecond) => append_i64::<DurationMicrosecondType>(array, limbs),
        Duration(TimeUnit::Nanosecond) => append_i64::<DurationNanosecondType>(array, limbs),
        Interval(IntervalUnit::YearMonth) => append_i32::<IntervalYearMonthType>(array, limbs),
        Interval(IntervalUnit::DayTime) => append_day_time(array, limbs),
        Interval(IntervalUnit::MonthDayNano) => append_month_day_nano(array, limbs),
        other => return internal_err!("gpusort: no key encoding for {other}"),
    }
    Ok(())
}

fn append_map<T: ArrowPrimitiveType>(
    array: &ArrayRef,
    out: &mut Vec<u64>,
    encode: impl Fn(T::Native) -> u64,
) {
    let values: &PrimitiveArray<T> = array.as_primitive::<T>();
    out.extend(values.values().iter().map(|v| encode(*v)));
}

fn append_i32<T: ArrowPrimitiveType<Native = i32>>(array: &ArrayRef, limbs: &mut [Vec<u64>]) {
    append_map::<T>(array, &mut limbs[0], |v| signed(v as i64))
}

fn append_i64<T: ArrowPrimitiveType<Native = i64>>(array: &ArrayRef, limbs: &mut [Vec<u64>]) {
    append_map::<T>(array, &mut limbs[0], signed)
}

fn append_bool(array: &BooleanArray, out: &mut Vec<u64>) {
    out.extend(array.values().iter().map(|v| v as u64));
}

fn append_decimal128(array: &PrimitiveArray<Decimal128Type>, limbs: &mut [Vec<u64>]) {
    for v in array.values().iter() {
        let biased = (*v as u128) ^ (1u128 << 127);
        limbs[0].push((biased >> 64) as u64);
        limbs[1].push(biased as u64);
    }
}

fn append_decimal256(array: &PrimitiveArray<Decimal256Type>, limbs: &mut [Vec<u64>]) {
    for v in array.values().iter() {
        let (low, high) = v.to_parts();
        let high = (high as u128) ^ (1u128 << 127);
        limbs[0].push((high >> 64) as u64);
        limbs[1].push(high as u64);
        limbs[2].push((low >> 64) as u64);
        limbs[3].push(low as u64);
    }
}

fn append_day_time(array: &ArrayRef, limbs: &mut [Vec<u64>]) {
    for v in array.as_primitive::<IntervalDayTimeType>().values().iter() {
        limbs[0].push(signed(v.days as i64));
        limbs[1].push(signed(v.milliseconds as i64));
    }
}

fn append_month_day_nano(array: &ArrayRef, limbs: &mut [Vec<u64>]) {
    for v in array
        .as_primitive::<IntervalMonthDayNanoType>()
        .values()
        .iter()
    {
        limbs[0].push(signed(v.months as i64));
        limbs[1].push(signed(v.days as i64));
        limbs[2].push(signed(v.nanoseconds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_total_order_matches_total_cmp() {
        let values = [
            f64::from_bits(0xfff8_0000_0000_0001), // -NaN
            f64::NEG_INFINITY,
            -1.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            2.0,
            f64::INFINITY,
            f64::NAN,
        ];
        for pair in values.windows(2) {
            assert_eq!(pair[0].total_cmp(&pair[1]), std::cmp::Ordering::Less);
            let (a, b) = (
                float_total_order::<64>(pair[0].to_bits()),
                float_total_order::<64>(pair[1].to_bits()),
            );
            assert!(a < b, "{} !< {}", pair[0], pair[1]);
        }
    }

    #[test]
    fn f32_total_order_stays_in_32_bits() {
        let neg_zero = float_total_order::<32>((-0.0f32).to_bits() as u64);
        let pos_zero = float_total_order::<32>(0.0f32.to_bits() as u64);
        assert!(neg_zero < pos_zero);
        assert!(float_total_order::<32>(f32::NAN.to_bits() as u64) <= u32::MAX as u64);
    }

    /// The raw values buffer of `array` (its own rows only) and, for Boolean, the bitmap.
    fn raw_values(array: &ArrayRef, source: LimbSource) -> Vec<u8> {
        if source.kind == LimbKind::Bit {
            let bits = array.as_boolean().values();
            let mut out = vec![0u8; bits.len().div_ceil(8)];
            for (i, b) in bits.iter().enumerate() {
                out[i / 8] |= (b as u8) << (i % 8);
            }
            return out;
        }
        let data = array.to_data();
        let stride = source.stride as usize;
        data.buffers()[0].as_slice()[data.offset() * stride..(data.offset() + data.len()) * stride]
            .to_vec()
    }

    #[test]
    fn limb_sources_read_what_append_limbs_writes() {
        use arrow::array::*;
        use std::sync::Arc;
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(BooleanArray::from(vec![true, false, true, true, false]).slice(1, 4)),
            Arc::new(Int8Array::from(vec![i8::MIN, -1, 0, 1, i8::MAX])),
            Arc::new(Int16Array::from(vec![i16::MIN, -300, 0, 300, i16::MAX])),
            Arc::new(Int32Array::from(vec![i32::MIN, -7, 0, 7, i32::MAX]).slice(2, 3)),
            Arc::new(Int64Array::from(vec![i64::MIN, -1, 0, 1, i64::MAX])),
            Arc::new(UInt8Array::from(vec![0, 1, 200, 255])),
            Arc::new(UInt16Array::from(vec![0, 1, 60000])),
            Arc::new(UInt32Array::from(vec![0, 1, u32::MAX])),
            Arc::new(UInt64Array::from(vec![0, 1, u64::MAX])),
            Arc::new(Float16Array::from(vec![
                half::f16::NEG_INFINITY,
                half::f16::from_f32(-0.0),
                half::f16::from_f32(0.0),
                half::f16::NAN,
            ])),
            Arc::new(Float32Array::from(vec![
                f32::NEG_INFINITY,
                -0.0,
                0.0,
                1.5,
                f32::NAN,
            ])),
            Arc::new(Float64Array::from(vec![
                -f64::NAN,
                -2.5,
                -0.0,
                0.0,
                f64::INFINITY,
            ])),
            Arc::new(
                Decimal128Array::from(vec![i128::MIN, -1, 0, 1 << 80, i128::MAX])
                    .with_precision_and_scale(38, 2)
                    .unwrap(),
            ),
            Arc::new(Decimal256Array::from(vec![
                i256::MIN,
                i256::from_i128(-5),
                i256::ZERO,
                i256::from_parts(7, 1 << 100),
                i256::MAX,
            ])),
            Arc::new(Date32Array::from(vec![-10, 0, 19000])),
            Arc::new(TimestampNanosecondArray::from(vec![-1, 0, 1]).with_timezone("UTC")),
            Arc::new(IntervalDayTimeArray::from(vec![
                IntervalDayTime::new(-1, 5),
                IntervalDayTime::new(3, -9),
            ])),
            Arc::new(IntervalMonthDayNanoArray::from(vec![
                IntervalMonthDayNano::new(1, -2, 3),
                IntervalMonthDayNano::new(-4, 5, i64::MIN),
            ])),
        ];
        for array in &arrays {
            let sources = limb_sources(array.data_type()).expect("fixed width");
            let mut expected = vec![Vec::new(); limb_count(array.data_type())];
            append_limbs(array, &mut expected).unwrap();
            assert_eq!(sources.len(), expected.len(), "{}", array.data_type());
            for (source, limb) in sources.iter().zip(&expected) {
                let raw = raw_values(array, *source);
                let read: Vec<u64> = (0..array.len())
                    .map(|row| limb_from_bytes(&raw, row, *source))
                    .collect();
                assert_eq!(&read, limb, "{} {source:?}", array.data_type());
            }
        }
    }

    #[test]
    fn every_supported_fixed_width_type_has_limb_sources() {
        for data_type in [
            DataType::Null,
            DataType::Time64(TimeUnit::Microsecond),
            DataType::Duration(TimeUnit::Second),
            DataType::Decimal64(10, 2),
        ] {
            assert!(unsupported_reason(&data_type).is_none());
            assert_eq!(
                limb_sources(&data_type).map(|s| s.len()),
                Some(limb_count(&data_type))
            );
        }
        assert!(limb_sources(&DataType::Utf8).is_none());
    }

    #[test]
    fn signed_flip_orders_extremes() {
        assert!(signed(i64::MIN) < signed(-1));
        assert!(signed(-1) < signed(0));
        assert!(signed(0) < signed(i64::MAX));
    }
}
