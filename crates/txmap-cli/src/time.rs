//! Points in time on the command line: RFC 3339 or `@SECONDS`, as
//! nanoseconds since the Unix epoch (UTC).

/// Parses `2026-11-24T05:00:00Z`, `2026-11-24 06:00:00.25+01:00` (a space
/// or `T`; `Z` or an offset; an optional fraction of a second) or
/// `@1795000000` (seconds since the epoch).
pub fn parse(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a time: use RFC 3339 (2026-11-24T05:00:00Z) or @SECONDS");
    if let Some(secs) = s.strip_prefix('@') {
        let secs: u64 = secs.parse().map_err(|_| bad())?;
        return secs.checked_mul(1_000_000_000).ok_or_else(bad);
    }
    let b = s.as_bytes();
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let t = s.get(r).ok_or_else(bad)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse().map_err(|_| bad())
    };
    if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60
    {
        return Err(bad());
    }
    let mut rest = &s[19..];
    let mut nanos = 0i64;
    if let Some(f) = rest.strip_prefix('.') {
        let digits = f.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(bad());
        }
        nanos = f[..digits].parse::<i64>().map_err(|_| bad())? * 10i64.pow(9 - digits as u32);
        rest = &f[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let oh = num(rest_at(s, rest, 1)..rest_at(s, rest, 3))?;
            let om = num(rest_at(s, rest, 4)..rest_at(s, rest, 6))?;
            if oh > 23 || om > 59 {
                return Err(bad());
            }
            let o = oh * 3600 + om * 60;
            if rest.starts_with('-') { -o } else { o }
        }
        _ => return Err(bad()),
    };
    // A leap second (:60) counts as the next second's start.
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    if secs < 0 {
        return Err(format!("{s:?} is before 1970"));
    }
    (secs as u64)
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(nanos as u64))
        .ok_or_else(bad)
}

/// Where byte `i` of `rest` (a suffix of `s`) is in `s`.
fn rest_at(s: &str, rest: &str, i: usize) -> usize {
    s.len() - rest.len() + i
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date in the proleptic Gregorian calendar
/// (Howard Hinnant's "days_from_civil" algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn rfc3339_and_epoch_seconds_agree_with_known_instants() {
        // 2000-03-01T00:00:00Z is 951,868,800 s after the epoch (a leap
        // year's February behind it); 1970-01-01 is 0.
        assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse("2000-03-01T00:00:00Z"), Ok(951_868_800_000_000_000));
        assert_eq!(parse("@951868800"), Ok(951_868_800_000_000_000));
        assert_eq!(
            parse("2000-03-01 01:30:00.5+01:30"),
            Ok(951_868_800_500_000_000)
        );
        assert_eq!(
            parse("2000-02-29T23:00:00-01:00"),
            Ok(951_868_800_000_000_000)
        );
        for bad in [
            "2000-02-30T00:00:00Z",
            "2001-02-29T00:00:00Z",
            "2000-13-01T00:00:00Z",
            "2000-03-01T00:00:00",
            "2000-03-01T24:00:00Z",
            "2000-03-01T00:00:00.Z",
            "2000-03-01T00:00:00+0100",
            "1969-12-31T23:59:59Z",
            "@-1",
            "yesterday",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_library_prints_what_the_parser_reads() {
        for t in [0, 951_868_800_500_000_000, 1_795_000_000_123_456_789] {
            assert_eq!(parse(&txmap::archive::format_time(t)), Ok(t));
        }
    }
}
